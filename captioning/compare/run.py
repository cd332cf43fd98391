"""The whole comparison: train the grid's missing cells, re-run some for reproducibility,
measure dot/additive throughput, write the report (Markdown, JSON, plots, a wandb run)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from ..benchmark import BenchConfig, run_benchmark
from ..data.prepare import load_dataset_records
from ..errors import RunFault, UserError
from ..gallery import build_gallery
from ..models.attention import ATTENTIONS
from ..models.cpu_speed import configure_cpu
from ..models.encoder_weights import weights_problem
from ..schema import completed
from ..schema.fields import REQUIRED
from ..schema.run import Compare
from .cells import Cell, expand_grid, group_of
from .convergence import convergence_report, tally
from .convergence_tables import convergence_markdown
from .encoder_check import encoder_check, encoder_check_markdown
from .executor import make_executor
from .grid import GridRunner
from .plan import SweepPlan, SweepThenGrid
from .report import build_markdown, build_report, save_plots
from .report_figures import save_curves, save_sweep_curves
from .status import GridBoard, grid_status, status_text, sweep_text
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


def run_comparison(cfg: DictConfig, overrides: list[str],
                   compose: Callable[[list[str]], DictConfig]) -> Path | None:
    """_compare below; cells that failed (compare.workers) are named after the report
    of the others, and the command exits non-zero."""
    failed: list[str] = []
    out = _compare(cfg, overrides, compose, failed)
    if failed:
        raise RunFault(f"grid: {len(failed)} cell(s) failed (the report holds the others); fix "
                       "them and run the same command again:\n  - " + "\n  - ".join(failed))
    return out


def _compare(cfg: DictConfig, overrides: list[str],
             compose: Callable[[list[str]], DictConfig], failed: list[str]) -> Path | None:
    """cfg: the composed train config with a `compare` block (an experiment preset);
    overrides: the user's command-line overrides, applied to every cell; compose(overrides)
    -> a cell's train config. Returns the report directory (None: no finished cell)."""
    configure_cpu()  # before the benchmark or any cell starts torch's threads
    if cfg.compare is None:
        raise UserError("no compare settings: add experiment=cross_modal (or cross_modal_quick)")
    spec = completed(OmegaConf.to_container(cfg.compare, resolve=True), Compare, "compare.")  # + gallery's
    source = spec["throughput_from"]
    if source and not Path(source).is_file():  # before any cell trains
        raise UserError(f"compare.throughput_from={source}: no such file; give a report.json "
                        "written by scripts/compare.py, or drop the key to measure")
    # compare.gallery's keys are its schema's (schema.run.GalleryCells); each must be given,
    # before any cell trains
    if spec["gallery"] and (missing := [k for k, v in spec["gallery"].items() if v == REQUIRED]):
        raise UserError(f"compare.gallery: {', '.join(missing)} not given: give {{decoder, dims, seed, "
                        "attentions: [...]}} (and optionally device), e.g. '{decoder: lstm, dims: "
                        "mismatched_whitened, seed: 0, attentions: [additive, dot]}'")
    _check_conditions(spec)
    # every cell reads this encoder file: before any of them (a status needs no file, only not another one)
    encoder = OmegaConf.to_container(cfg.encoder, resolve=True) if "encoder" in cfg else {}
    if problem := weights_problem(encoder, absent_ok=spec["status"] or not spec["train"]):
        raise UserError(problem)
    runner = _runner(spec, compose, overrides)
    root = runner.root
    plan = _plan(spec, runner)
    after_sweep = isinstance(plan, SweepThenGrid)
    if after_sweep:  # the modes compare.rates leaves out take the rate their sweep chose
        spec["rates"] = plan.rates()
    trains_sweep = after_sweep and spec["train"] and bool(spec["sweep"].get("train"))
    if after_sweep and not spec["train"] and not spec["status"] and not spec["rates"]:
        raise UserError(_sweep_unfinished(spec["name"], plan))
    # a grid that trains its sweep first learns its cells' rates as it goes
    cells = plan.cells() if trains_sweep else at_chosen_rates(spec, expand_grid(spec))
    if spec["status"]:  # where the grid stands; nothing trained, nothing written
        if trains_sweep:  # the sweep's cells begun or startable now, and the rated grid
            ready = set(plan.ready(set()))
            cells = [c for c in plan.sweep if c in ready or runner.directory(c).is_dir()] + plan.rated()
        dirs = {c: runner.directory(runner.resolve(c)) for c in cells}
        print(status_text(spec["name"], root, grid_status(cells, dirs)))
        if trains_sweep:
            print(sweep_text(plan.choices(), plan.seeds()))
        return None
    start = time.time()
    # the grid's wandb table: cells in other processes (a cell trained in this one would end
    # this process's wandb run when it starts its own)
    board = _grid_board(cfg, spec, cells) if spec["train"] and spec["workers"] > 1 else None
    if spec["train"]:
        executor = make_executor(spec["executor"], root / ".submitit", spec["slurm"])
        try:
            if plan is not None and executor is None and (spec["lrs"] or trains_sweep):
                # cells as the plan makes them ready (compare/plan.py), one or N at a time
                dirs = runner.run_plan(plan, spec["workers"], board and board.update)
            else:  # every cell (a cluster's jobs are submitted at once; workers: N at a time)
                dirs = runner.run(cells, executor, spec["workers"], board and board.update)
        finally:
            if board is not None:
                board.finish()
        failed += runner.failed
        if trains_sweep:  # the report: the grid's cells at the rates the sweep chose
            spec["rates"] = plan.rates()
            cells = at_chosen_rates(spec, expand_grid(spec))
            dirs = {c: d for c, d in dirs.items() if c in set(cells)}
    else:  # report only: the cells that exist
        dirs = runner.finished(cells)
    train_s = time.time() - start
    if not dirs:  # report-only before any cell finished: nothing to report, nothing written
        log.warning("no finished cells under %s: nothing to report (train them with "
                    "compare.train=true, or copy a grid's cells/ there)", root / "cells")
        return None
    if spec["lrs"]:  # a learning-rate sweep: its own report (validation only)
        return _sweep(spec, dirs, cells, root, train_s)
    if spec["report"] == "convergence":
        return _convergence(cfg, spec, dirs, runner, train_s)
    reruns = runner.verify(dirs, spec["verify"], spec["train"])
    refs = _test_references(cfg)
    tp = _throughput(spec)
    report = build_report(dirs, refs, spec, tp, reruns, spec["bootstrap_samples"])
    report["grid_wall_s"] = train_s
    out = root / time.strftime("%Y-%m-%d_%H-%M-%S")
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


def _check_conditions(spec: dict) -> None:
    """compare.interactions, compare.controls and compare.same_features name conditions of
    compare.dim_settings (a typo would silently drop a table of the report; a control names
    modes of compare.attentions too), and a held-out sweep's seeds are none of
    the grid's, before any cell trains."""
    known = set(spec["dim_settings"])
    for i, pair in enumerate(spec["interactions"]):
        if not isinstance(pair, list | tuple) or len(pair) != 2 or not set(pair) <= known:
            raise UserError(f"compare.interactions[{i}]={pair}: give two conditions of compare."
                            f"dim_settings ({', '.join(sorted(known))}), e.g. [mismatched_whitened, matched]")
    # a control's modes are attention modes, not necessarily this grid's: a grid run for some
    # modes alone (compare.attentions) reports the controls whose cells it has
    for i, c in enumerate(spec.get("controls") or []):
        if (not isinstance(c, list | tuple) or len(c) != 4 or not {c[0], c[2]} <= known
                or not {c[1], c[3]} <= set(ATTENTIONS)):
            raise UserError(f"compare.controls[{i}]={c}: give [dims, mode, other dims, other mode], "
                            f"conditions of compare.dim_settings ({', '.join(sorted(known))}) and "
                            "attention modes, e.g. [matched, general, mismatched_whitened, dot]")
    sweep = spec.get("sweep") or {}
    if not spec.get("lrs") and sweep.get("held_out") and (shared := sorted(
            set(sweep.get("seeds") or []) & set(spec.get("seeds") or []))):
        raise UserError(f"compare.sweep.seeds and compare.seeds share seed(s) {shared}: a held-out "
                        "sweep (compare.sweep.held_out=true) chooses rates on seeds whose test "
                        "scores no grid cell reports; give the sweep other seeds")
    for dims, base in spec["same_features"].items():
        if not {dims, base} <= known or dims == base:
            raise UserError(f"compare.same_features.{dims}={base}: both must be conditions of "
                            f"compare.dim_settings ({', '.join(sorted(known))}), and differ")


def _write_report(out: Path, title: str, markdown: str, report: dict, train_s: float) -> None:
    """report.md (titled) and report.json into `out`; the markdown to the terminal."""
    (out / "report.md").write_text(f"# {title}\n\n{markdown}")
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(markdown)
    log.info("report: %s (grid %.0f s)", out / "report.md", train_s)


def _convergence(cfg: DictConfig, spec: dict, dirs: dict[Cell, Path], runner: GridRunner,
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


def _sweep(spec: dict, dirs: dict[Cell, Path], cells: list[Cell], root: Path, train_s: float) -> Path:
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
        if any((dirs[cell] / "checkpoints").glob("*.ckpt")):
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
    dirs = _runner(spec, compose, mine + [f"experiment={name}"]).finished(expand_grid(spec))
    if not dirs:
        return None
    section = build_report(dirs, _test_references(cfg), spec, {}, [], samples)
    section["about"] = (f"`experiment={name}`: encoder {cfg.encoder.name}, weights "
                        f"`{cfg.encoder.weights_path or 'random init'}`; "
                        f"{len(set(dirs.values()))} finished runs.")
    return section


def _sweep_unfinished(name: str, plan: SweepThenGrid) -> str:
    """Report only, before the grid's own sweep has chosen any rate: where the sweep stands and
    the two commands that move it on (no report of a grid without cells)."""
    done = len(plan.runner.finished(plan.sweep))
    return (f"compare.train=false: experiment={name} has no cell to report yet: its learning-rate "
            f"sweep has chosen no mode's rate yet ({done} of its cells finished, of at most "
            f"{len(plan.sweep)}, under {plan.runner.root / 'cells'}). Train it with "
            "compare.sweep.train=true; compare.status=true compare.sweep.train=true shows where "
            "each mode stands")


def at_chosen_rates(spec: dict, cells: list[Cell]) -> list[Cell]:
    """A grid that names its sweep (compare.sweep) trains each cell at the rate the sweep chose
    (compare.rates), never at the base rate: cells without one are left out, named in one log
    line; none left is a UserError saying how to choose them. Other grids: every cell."""
    if not spec["sweep"] or spec["lrs"]:
        return cells
    unrated = sorted({c.group for c in cells if not c.lr})
    if unrated and len(unrated) == len({c.group for c in cells}):
        raise UserError(f"compare.rates gives no rate to any cell of this grid ({', '.join(unrated)}): "
                        "run its learning-rate sweep first (e.g. experiment=convergence_sweep) "
                        "and commit the rates its report chose as compare.rates, or train both "
                        "in one command: compare.sweep.train=true")
    if unrated:
        log.warning("grid: no chosen rate yet (compare.rates) for %s: their cells are left out until "
                    "the sweep chooses one", ", ".join(unrated))
    return [c for c in cells if c.lr]


def _plan(spec: dict, runner: GridRunner) -> SweepPlan | None:
    """The work order where it depends on results (compare/plan.py): a bracketed sweep's
    (compare.lrs), or a grid's that names its sweep (compare.sweep: its rates come from it)."""
    if spec["lrs"]:
        lrs = [float(x) for x in spec["lrs"]]
        return SweepPlan(runner, expand_grid(spec), lrs) if spec["bracket"] else None
    if not spec["sweep"]:
        return None
    sweep = {**spec, **spec["sweep"]}  # its lrs, dims, seeds and limits
    return SweepThenGrid(runner, expand_grid(sweep), [float(x) for x in sweep["lrs"]],
                         lambda rates: expand_grid({**spec, "rates": rates}), dict(spec["rates"]))


def _runner(spec: dict, compose: Callable[[list[str]], DictConfig], overrides: list[str]) -> GridRunner:
    """The grid of one experiment: its cells under <compare.root>/<name>/cells; every other
    experiment under the same root shares its finished cells (same hash = same run)."""
    root = Path(spec["root"]) / spec["name"]
    shared = sorted(p for p in root.parent.glob("*") if (p / "cells").is_dir() and p != root)
    return GridRunner(compose, overrides, root, spec["dim_settings"], spec["decoder_settings"], shared)


def _test_references(cfg: DictConfig) -> dict:
    """{image_id: [reference token lists]} of the test split: what the report scores against."""
    records, _, _ = load_dataset_records(OmegaConf.to_container(cfg.data, resolve=True))
    return {r.image_id: r.captions for r in records if r.split == "test"}


def _grid_board(cfg: DictConfig, spec: dict, cells: list[Cell]) -> GridBoard | None:
    """With logger=wandb, the grid's own run (its cells' table, updated as they start and end)."""
    if "wandb" not in (cfg.logger or {}):
        return None
    from ..lit.loggers import wandb_logger

    settings = OmegaConf.to_container(cfg.logger.wandb, resolve=True)
    settings.pop("_target_", None)
    settings["save_dir"] = str(Path(spec["root"]) / spec["name"])  # beside its cells
    logger = wandb_logger(**{**settings, "name": f"grid-{spec['name']}", "group": "compare",
                             "job_type": "grid", "tags": ["grid", spec["name"]]})
    return None if logger is None else GridBoard(logger, cells)


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
