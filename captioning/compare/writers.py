"""What a grid writes once its cells are in: the standard report (with its sections, gallery
and wandb run), the convergence report (with its sweep and encoder check) and a learning-rate
sweep's own report, each into a timestamped folder beside the grid's cells."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from ..benchmark import BenchConfig, run_benchmark
from ..data.prepare import load_dataset_records
from ..errors import UserError
from ..gallery import build_gallery
from .cells import Cell, expand_grid, group_of
from .convergence import convergence_report, tally
from .convergence_tables import convergence_markdown
from .encoder_check import encoder_check, encoder_check_markdown
from .grid import GridRunner, grid_runner
from .report import build_markdown, build_report
from .report_figures import save_curves, save_plots, save_sweep_curves
from .status import has_checkpoint
from .sweep import add_margins, sweep_markdown, sweep_report

log = logging.getLogger(__name__)


def throughput(spec: dict) -> dict:
    """dot / additive training throughput from the benchmark (one process, same shapes)."""
    settings = BenchConfig(sections="train", modes="additive,dot", decoders=",".join(spec["decoders"]),
                           no_naive=True, **spec["benchmark_args"])
    return ratios_of(run_benchmark(settings))


def ratios_of(res: dict) -> dict:
    """The dot/additive ratios (and shapes, device) of a run_benchmark result."""
    c = res["config"]
    out = {"shapes": f"batch {c['batch']}, {c['grid']}x{c['grid']}x{c['feature_dim']} features, "
                     f"width {c['d_model']}, vocabulary {c['vocab']}, {res['threads']} threads",
           "device": res["device"]}
    out.update({k: v for k, v in res["ratios"].items() if "dot_over_additive" in k})
    return out


def _throughput(spec: dict) -> dict:
    """The benchmark's ratios: measured now, none, or (compare.throughput_from) read from a
    committed file, so that a committed report rebuilds exactly from committed files: a
    `scripts/benchmark.py --json` output (the measurement itself) or an earlier report.json."""
    source = spec["throughput_from"]
    if source:
        data = json.loads(Path(source).read_text())
        if "ratios" in data:  # scripts/benchmark.py --json: the measurement itself, committed
            return {**ratios_of(data), "source": str(source)}
        return data.get("throughput", {})  # a report.json: the ratios it showed
    return throughput(spec) if spec["benchmark"] else {}


def write_standard(cfg: DictConfig, spec: dict, dirs: dict[Cell, Path], runner: GridRunner,
                   overrides: list[str], compose: Callable[[list[str]], DictConfig], train_s: float) -> Path:
    """The standard report (compare/report.py): its reruns, throughput, plots, the sections of
    other experiments (compare.sections), the wandb run and the gallery (compare.gallery)."""
    reruns = runner.verify(dirs, spec["verify"], spec["train"])
    refs = _test_references(cfg)
    tp = _throughput(spec)
    report = build_report(dirs, refs, spec, tp, reruns, spec["bootstrap_samples"])
    report["grid_wall_s"] = train_s
    out = runner.root / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    markdown = build_markdown(report)
    plots = save_plots(report, out)
    report["sections"] = {}
    for name in spec["sections"] or []:
        section = _section(name, overrides, compose, spec["bootstrap_samples"])
        if section is None:
            markdown += (f"\n## {name}\n\nNo finished cells yet "
                         f"(`python scripts/compare.py experiment={name}`).\n")
            continue
        report["sections"][name] = section
        markdown += f"\n## {name}\n\n{section['about']}\n\n{build_markdown(section)}"
        plots += save_plots(section, out, prefix=f"{name}_")
    _write_report(out, spec["name"], markdown, report, train_s)
    if "wandb" in (cfg.logger or {}):
        _wandb_summary(cfg, spec, report, markdown, plots, out)
    if spec["gallery"]:
        _gallery(spec["gallery"], runner, dirs, out / "gallery", spec["train"])
    return out


def _write_report(out: Path, title: str, markdown: str, report: dict, train_s: float) -> None:
    """report.md (titled) and report.json into `out`; the markdown to the terminal."""
    (out / "report.md").write_text(f"# {title}\n\n{markdown}")
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(markdown)
    log.info("report: %s (grid %.0f s)", out / "report.md", train_s)


def write_convergence(cfg: DictConfig, spec: dict, dirs: dict[Cell, Path], runner: GridRunner,
                 train_s: float) -> Path:
    """experiment=convergence's report (compare/convergence.py), with its sweep's table."""
    samples = spec["bootstrap_samples"]
    snapshots = list(cfg.checkpoint.snapshot_epochs)
    report = convergence_report(dirs, _test_references(cfg), {**spec, "snapshot_epochs": snapshots},
                                samples)
    report["throughput"] = _throughput(spec)
    if spec.get("encoder_check"):
        report["encoder_check"] = encoder_check(Path(spec["encoder_check"]))
    out = runner.root / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    save_curves(report, out)
    sweep = ""
    if spec["sweep"]:
        sweep_cells = expand_grid({**spec, **spec["sweep"]})  # its lrs, dims and seeds
        swept = runner.finished(sweep_cells)
        lrs = [float(x) for x in spec["sweep"]["lrs"]]
        report["sweep"] = sweep_report(swept, lrs, sweep_cells)
        add_margins(report["sweep"], {group_of(r): r["val_best"] for r in report["rows"]})
        # compute and provenance of the whole study: the sweep's seed-0 cells at the chosen
        # rates are grid cells (one hash), counted once
        report.update(tally(dirs, swept))
        figure = save_sweep_curves(report["sweep"], out)
        sweep = ("### Learning rates (experiment=convergence_sweep)\n\n"
                 + sweep_markdown(report["sweep"], lrs)
                 + f"\n{len(swept)} of {len(sweep_cells)} sweep cells finished."
                 + (f"\n\n![validation score per epoch at each rate]({figure.name})" if figure else "")
                 + "\n\n")
    check = (encoder_check_markdown(report["encoder_check"], spec["encoder_check"])
             if "encoder_check" in report else "")
    features = f"**Features.** {' '.join(spec['features'].split())}\n\n" if spec.get("features") else ""
    markdown = features + check + sweep + convergence_markdown(report, figure="learning_curves.png")
    report["grid_wall_s"] = train_s
    _write_report(out, spec["name"], markdown, report, train_s)
    return out


def write_sweep(spec: dict, dirs: dict[Cell, Path], cells: list[Cell], root: Path, train_s: float) -> Path:
    """The sweep's report, sweep_<timestamp>/report.{md,json} under the grid's root (cells: all
    of the sweep's, dirs: those finished)."""
    report = sweep_report(dirs, [float(lr) for lr in spec["lrs"]], cells)
    report["grid_wall_s"] = train_s
    out = root / f"sweep_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    out.mkdir(parents=True, exist_ok=True)
    markdown = sweep_markdown(report, [float(lr) for lr in spec["lrs"]])
    _write_report(out, f"{spec['name']}: learning-rate sweep", markdown, report, train_s)
    return out


def _gallery(want: dict, runner: GridRunner, dirs: dict[Cell, Path], out: Path,
             train_missing: bool) -> None:
    """compare.gallery = {decoder, dims, seed, attentions: [...]}: those finished cells side by
    side (captioning.gallery) in <report>/gallery/. A committed cell has no checkpoint: it is
    trained again from scratch into <root>/gallery_runs/ (its captions must come back the same:
    the gallery counts any that do not) and the attention is read from that checkpoint."""
    cells = [Cell(want["decoder"], want["dims"], mode, int(want["seed"])) for mode in want["attentions"]]
    missing = [c.label for c in cells if c not in dirs]
    if missing:
        raise UserError(f"compare.gallery: no finished cell {', '.join(missing)}; finished: "
                        f"{', '.join(sorted(c.label for c in dirs)[:8])} ...")
    checkpoints = []
    for cell in cells:
        if has_checkpoint(dirs[cell]):
            checkpoints.append(None)
            continue
        again = runner.root / "gallery_runs" / dirs[cell].name
        if runner.rerun(cell, again, train_missing) is None:
            raise UserError(f"compare.gallery: {dirs[cell]} has no checkpoint and compare.train=false "
                            f"forbids training it again into {again}")
        checkpoints.append(again / "checkpoints" / "best.ckpt")
    summary = build_gallery([dirs[c] for c in cells], out, [c.label for c in cells],
                            device=want["device"], checkpoints=checkpoints)
    log.info("gallery: %s (%d images; %d captions re-decoded differently)", out / "index.html",
             summary["images"], sum(r["redecoded_differs"] for r in summary["runs"]))


def _section(name: str, overrides: list[str], compose: Callable[[list[str]], DictConfig],
             samples: int) -> dict | None:
    """Another experiment's finished cells as a further table of this report
    (compare.sections: e.g. the comparison's trained-encoder condition): its own preset, the
    same command-line overrides otherwise; report only, never trained from here."""
    mine = [o for o in overrides if o.split("=", 1)[0].lstrip("+") != "experiment"]
    cfg = compose(mine + [f"experiment={name}"])
    spec = OmegaConf.to_container(cfg.compare, resolve=True)
    dirs = grid_runner(spec, compose, mine + [f"experiment={name}"]).finished(expand_grid(spec))
    if not dirs:
        return None
    section = build_report(dirs, _test_references(cfg), spec, {}, [], samples)
    section["about"] = (f"`experiment={name}`: encoder {cfg.encoder.name}, weights "
                        f"`{cfg.encoder.weights_path or 'random init'}`; "
                        f"{len(set(dirs.values()))} finished runs.")
    return section


def _test_references(cfg: DictConfig) -> dict:
    """{image_id: [reference token lists]} of the test split: what the report scores against."""
    records, _, _ = load_dataset_records(OmegaConf.to_container(cfg.data, resolve=True))
    return {r.image_id: r.captions for r in records if r.split == "test"}


def _wandb_summary(cfg, spec, report, markdown, plots, out: Path) -> None:
    """One run of job_type 'compare' holding the table and the plots, saved beside the report."""
    from ..lit.loggers import wandb_logger

    with open_dict(cfg):
        cfg.paths.output_dir = str(out)  # save beside the report, not in a Hydra run dir
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
