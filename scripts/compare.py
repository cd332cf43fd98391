"""Run the controlled cross-modal comparison and write its report.

    python scripts/compare.py experiment=cross_modal_quick       # LSTM, 2 modes x 2 dims x 2 seeds
    python scripts/compare.py experiment=cross_modal             # the full grid (resumable)
    python scripts/compare.py experiment=cross_modal compare.seeds=[0,1,2,3] data=flickr8k
    python scripts/compare.py experiment=cross_modal compare.train=false   # report what is done

Arguments are Hydra overrides of conf/train.yaml (the experiment preset sets `compare.*`:
attentions, dims, decoders, seeds, the step budget). Each cell trains once into
results/<name>/cells/<config hash>/; re-running skips finished cells, so an interrupted grid
resumes. The report goes to results/<name>/<timestamp>/ (report.md, report.json, PNG plots).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict

from captioning.compare import GridRunner, build_markdown, build_report, expand_grid, save_plots
from captioning.data.karpathy import load_karpathy
from captioning.data.prepare import resolve_json

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("compare")


def compose_train(overrides: list[str]) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


def throughput(spec: dict) -> dict:
    """dot / additive training throughput from the benchmark (one process, same shapes)."""
    decoders = ",".join(spec["decoders"])
    with_file = ROOT / "results" / ".benchmark.json"
    with_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "scripts" / "benchmark.py"), "--sections", "train",
           "--modes", "additive,dot", "--decoders", decoders, "--no-naive", "--json", str(with_file),
           *spec.get("benchmark_args", [])]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    res = json.loads(with_file.read_text())
    c = res["config"]
    out = {"shapes": f"batch {c['batch']}, {c['grid']}x{c['grid']}x{c['feature_dim']} features, "
                     f"width {c['d_model']}, vocabulary {c['vocab']}, {res['threads']} threads"}
    out.update({k: v for k, v in res["ratios"].items() if "dot_over_additive" in k})
    return out


def main(argv: list[str]) -> Path:
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        raise SystemExit(0)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    cfg = compose_train(argv)
    if "compare" not in cfg:
        raise SystemExit("no compare settings: add experiment=cross_modal (or cross_modal_quick)")
    spec = OmegaConf.to_container(cfg.compare, resolve=True)
    root = Path(spec.get("root", "results")) / spec["name"]
    runner = GridRunner(compose_train, argv, root, spec["dim_settings"])
    cells = expand_grid(spec)
    start = time.time()
    if spec.get("train", True):
        dirs = runner.run(cells)
    else:  # report only: the cells that exist
        dirs = {c: d for c in cells if ((d := runner.config(runner.resolve(c))[1]) / "results.json").exists()}
    train_s = time.time() - start
    reruns = runner.verify(dirs, spec.get("verify", 0), spec.get("train", True))
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    json_path, image_root = resolve_json(data_cfg)
    refs = {r.image_id: r.captions for r in load_karpathy(json_path, image_root) if r.split == "test"}
    tp = throughput(spec) if spec.get("benchmark", True) else {}
    report = build_report(dirs, refs, spec, tp, reruns, spec.get("bootstrap_samples", 1000))
    report["grid_wall_s"] = train_s
    out = root / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    markdown = build_markdown(report)
    (out / "report.md").write_text(f"# {spec['name']}\n\n{markdown}")
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    plots = save_plots(report, out)
    print(markdown)
    log.info("report: %s (grid %.0f s)", out / "report.md", train_s)
    if "wandb" in (cfg.get("logger") or {}):
        _wandb_summary(cfg, spec, report, markdown, plots, out)
    return out


def _wandb_summary(cfg, spec, report, markdown, plots, out: Path) -> None:
    """One run of job_type 'compare' holding the table and the plots, saved beside the report."""
    from captioning.lit.loggers import wandb_logger

    with open_dict(cfg):
        cfg.paths.output_dir = str(out)  # no Hydra run dir here: save beside the report
    settings = OmegaConf.to_container(cfg.logger.wandb, resolve=True)
    settings.pop("_target_", None)
    logger = wandb_logger(**{**settings, "name": f"compare-{spec['name']}", "group": "compare",
                             "job_type": "compare", "tags": ["compare", spec["name"]]})
    if logger is None:
        return
    import wandb

    run = logger.experiment
    cols = ["decoder", "dims", "attention", "bleu4_mean", "bleu4_std", "attr_acc_mean", "counted"]
    table = wandb.Table(columns=cols, data=[
        [r["decoder"], r["dims"], r["attention"], r["bleu4"]["mean"], r["bleu4"]["std"],
         r["attr_acc"]["mean"], r["counted"]] for r in report["rows"]])
    run.log({"compare/table": table, "compare/report": wandb.Html(f"<pre>{markdown}</pre>"),
             **{f"compare/{p.stem}": wandb.Image(str(p)) for p in plots}})
    run.summary.update({f"diff/{d['decoder']}/{d['dims']}/abs": d["abs"]["mean"] for d in report["diffs"]})
    run.finish()


if __name__ == "__main__":
    main(sys.argv[1:])
