"""The whole comparison: check the grid's settings, train its missing cells (its sweep's first,
where it chooses their rates), or say where it stands (compare.status); then write its report
(compare/writers.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..errors import RunFault, UserError
from ..models.attention import ATTENTIONS
from ..models.cpu_speed import configure_cpu
from ..models.encoder_weights import weights_problem
from ..schema import completed
from ..schema.compare import Compare
from ..schema.fields import REQUIRED
from .cells import Cell, expand_grid
from .encoder_record import restore_if_recorded
from .executor import make_executor
from .grid import GridRunner, grid_runner
from .plan import SweepPlan, SweepThenGrid
from .status import GridBoard, grid_status, status_text, sweep_text
from .writers import write_convergence, write_standard, write_sweep

log = logging.getLogger(__name__)


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
    # compare.gallery's keys are its schema's (schema.compare.GalleryCells); each must be given,
    # before any cell trains
    if spec["gallery"] and (missing := [k for k, v in spec["gallery"].items() if v == REQUIRED]):
        raise UserError(f"compare.gallery: {', '.join(missing)} not given: give {{decoder, dims, seed, "
                        "attentions: [...]}} (and optionally device), e.g. '{decoder: lstm, dims: "
                        "mismatched_whitened, seed: 0, attentions: [additive, dot]}'")
    _check_conditions(spec)
    # every cell reads this encoder file: before any of them (a status needs no file, only not another one)
    encoder = OmegaConf.to_container(cfg.encoder, resolve=True) if "encoder" in cfg else {}
    # a fresh clone: the pinned file comes from the grid's record, where it keeps one
    if spec["train"] and not spec["status"]:
        if done := restore_if_recorded(encoder, Path(spec["root"]) / spec["name"] / "encoder"):
            log.info(done)
    if problem := weights_problem(encoder, absent_ok=spec["status"] or not spec["train"]):
        raise UserError(problem)
    runner = grid_runner(spec, compose, overrides)
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
            if plan is not None and (spec["lrs"] or trains_sweep):
                # cells as the plan makes them ready (compare/plan.py): one or N at a time, or
                # a cluster's job arrays in waves
                dirs = runner.run_plan(plan, spec["workers"], board and board.update, executor=executor)
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
        return write_sweep(spec, dirs, cells, root, train_s)
    if spec["report"] == "convergence":
        return write_convergence(cfg, spec, dirs, runner, train_s)
    return write_standard(cfg, spec, dirs, runner, overrides, compose, train_s)


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


