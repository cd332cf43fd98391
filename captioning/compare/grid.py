"""Cells of the comparison grid, and running them: each cell is one train() run whose output
directory is named by its config hash, so a finished cell is never trained again, an
interrupted grid resumes where it stopped, and a cell killed mid-training resumes from its own
last checkpoint (train's resume). Cells named by an older hash rule are adopted, not retrained
(compare/adoption.py); a cell another experiment under the same results root finished is used
from there. Several grid processes may share one root: a cell is trained by one of them at a
time (compare/lock.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from ..lit.training import train
from ..models.captioner import resolved_attention
from ..provenance import config_hash, cpu_kind, hashed_view
from .adoption import LegacyCells, cell_config, write_cell_config
from .cell_training import train_cell
from .cells import BLIND, Cell
from .status import has_checkpoint

log = logging.getLogger(__name__)

class GridRunner:
    """compose(overrides) -> config; cells run into root/cells/<config hash>/, or are found
    finished in shared/<x>/cells/<config hash>/."""

    def __init__(self, compose: Callable[[list[str]], DictConfig], overrides: list[str],
                 root: Path, dims: dict[str, list[str]],
                 decoders: dict[str, list[str]] | None = None, shared: list[Path] = ()) -> None:
        self.compose, self.overrides, self.root, self.dims = compose, list(overrides), root, dims
        self.shared = [Path(p) for p in shared]  # other experiments' roots: see _shared
        self.decoders = decoders or {}
        self.legacy = LegacyCells(root, self.shared)  # cells named by an older hash rule
        self._composed: dict[tuple[str, ...], DictConfig] = {}  # see _query

    def config(self, cell: Cell, output_dir: Path | None = None,
               adopt: bool = True) -> tuple[DictConfig, Path]:
        """The cell's train config and its directory; `adopt`: a legacy cell that is this run is
        renamed to today's hash (training does it; a report reads it where it is)."""
        cfg = self.compose(self.overrides + cell.overrides(self.dims, self.decoders))
        out = self._locate(cfg, output_dir, adopt)
        with open_dict(cfg):
            cfg.paths.output_dir = str(out)
        return cfg, out

    def directory(self, cell: Cell) -> Path:
        """config(cell, adopt=False)'s directory, for queries (a report over many cells)."""
        return self._locate(self._query(cell), None, adopt=False)

    def _query(self, cell: Cell) -> DictConfig:
        """The cell's config for reading only (it must not leave the caller): cells that differ
        only in seed and rate share one composition (Hydra composes in ~0.5 s; a report of 90
        cells spent a minute on it), with the cell's two values set in it. The same config:
        neither value is read while composing (interpolations resolve later), and only the
        `hydra` node, which no hash reads, would list other overrides (test_compare)."""
        overrides = self.overrides + cell.overrides(self.dims, self.decoders)
        values = cell.values()
        kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+") not in values]
        key = (*kept, *values)  # the keys it sets: a cell without a rate keeps the composed one
        if key not in self._composed:
            self._composed[key] = cfg = self.compose(kept)
            with open_dict(cfg):
                cfg.paths.output_dir = "unset"  # not hashed; resolvable without Hydra (_locate)
        cfg = self._composed[key]  # set in place
        for dotted, value in values.items():
            OmegaConf.update(cfg, dotted, value)
        return cfg

    def _locate(self, cfg: DictConfig, output_dir: Path | None, adopt: bool) -> Path:
        """A composed cell's directory: output_dir, or its config hash under root (or where
        another experiment or an older hash rule has it)."""
        with open_dict(cfg):
            cfg.paths.output_dir = "unset"  # paths are not hashed; resolvable without Hydra
        plain = OmegaConf.to_container(cfg, resolve=True)
        plain.pop("hydra", None)
        out = output_dir or self.root / "cells" / config_hash(plain)
        if output_dir is None and not out.exists():
            out = self._shared(out) or self.legacy.adopt(plain, out, adopt) or out
        return out

    def _shared(self, out: Path) -> Path | None:
        """The same run finished by another experiment under the same results root (e.g. the
        attention zoo's classic modes are the comparison's default-width cells): the hash names
        the whole config but not the experiment, so it is the same run and is used where it is,
        not trained again. Only finished cells: one still training belongs to its grid."""
        for other in self.shared:
            if (other / "cells" / out.name / "results.json").is_file():
                log.debug("grid: %s finished in %s: used from there", out.name, other)
                return other / "cells" / out.name
        return None

    def resolve(self, cell: Cell) -> Cell:
        """A `mixed` cell is by construction the cell of the mode it picks: that one is run."""
        if cell.attention != "mixed":
            return cell
        choice = resolved_attention(OmegaConf.to_container(self._query(cell), resolve=True))
        return Cell(cell.decoder, cell.dims, choice, cell.seed, cell.lr)

    def finished(self, cells: list[Cell]) -> dict[Cell, Path]:
        """Report only: {cell: its directory} for the cells that finished (here or shared). A
        query: it renames nothing, writes nothing."""
        return {c: d for c in cells
                if ((d := self.directory(self.resolve(c))) / "results.json").exists()}

    def run(self, cells: list[Cell], executor=None, workers: int = 1,
            on_change: Callable[[dict[Cell, Path], set[str]], None] | None = None) -> dict[Cell, Path]:
        """Train every cell that has no results.json yet, here, `workers` at once on this
        machine (compare/workers.py: the failures in self.failed) or as jobs of a submitit
        `executor` (compare/executor.py); on_change(dirs, failed labels) whenever a cell starts
        or ends (the grid's wandb table); -> {cell: its directory}."""
        dirs: dict[Cell, Path] = {}
        self.failed: list[str] = []
        todo = []
        for cell in cells:
            target = self.resolve(cell)
            _, out = self.config(target)
            dirs[cell] = out
            if target not in todo and not (out / "results.json").exists():
                todo.append(target)
        done = len({d for d in dirs.values()}) - len(todo)
        log.info("grid: %d cells, %d distinct runs, %d finished, %d to train",
                 len(cells), len(set(dirs.values())), done, len(todo))
        changed = on_change or (lambda dirs, failed: None)
        changed(dirs, set())
        configs, parallel, steps = [], [], {}
        for out in {d for d in dirs.values() if (d / "results.json").exists()}:
            cell_config(out, save=True)  # finished: make sure its cell.json exists (older grids lacked it)
        for k, cell in enumerate(todo, 1):
            cfg, out = self.config(cell)
            step = f"[{k}/{len(todo)}]"
            if workers > 1 and executor is None:  # prepared as it starts (nothing written before)
                parallel.append((cell, cfg, out))
                steps[cell] = step
                continue
            out.mkdir(parents=True, exist_ok=True)
            if executor is not None:
                configs.append((cell.label, self._prepare(cfg, out, step, cell.label)))
                continue

            def fit(cfg: DictConfig, out: Path = out, step: str = step, label: str = cell.label) -> None:
                changed(dirs, set())  # under the cell's lock: it shows as running
                train(self._prepare(cfg, out, step, label))

            state = train_cell(cfg, out, fit)  # in this process, under the lock as every job
            if state != "trained":  # held elsewhere: a warning; finished meanwhile: news
                (log.warning if "being trained" in state else log.info)("grid: %s %s", cell.label, state)
            changed(dirs, set())
        if parallel:
            from .workers import run_parallel

            self.failed = run_parallel(parallel, workers, self.root / ".submitit",
                                       on_submit=lambda item: self._start(item, steps[item[0]]),
                                       on_change=lambda failed: changed(dirs, failed))
        if executor is not None and configs:
            from .executor import wait_for

            with executor.batch():  # one job array
                jobs = [(label, executor.submit(train_cell, cfg, Path(cfg.paths.output_dir), train))
                        for label, cfg in configs]
            log.info("grid: %d jobs submitted (%s ...); waiting for them", len(jobs), jobs[0][1].job_id)
            self.failed += wait_for(jobs)  # each failed cell named; the others' results kept
        busy = [c for c, d in dirs.items() if not (d / "results.json").exists()]
        if busy:  # another process is training them: the report shows what is finished
            log.warning("grid: %d cells still being trained by other processes; not in this "
                        "report (re-run it when they finish)", len(busy))
        return {c: d for c, d in dirs.items() if c not in busy}

    def run_plan(self, plan, workers: int = 1,
                 on_change: Callable[[dict[Cell, Path], set[str]], None] | None = None,
                 job: Callable | None = None, executor=None) -> dict[Cell, Path]:
        """Train the cells a plan (compare/plan.py) makes ready, as they become ready: one at a
        time here, or `workers` at once (a freed slot asks the plan again; job: what each
        worker runs, compare.workers' cell_job unless given), or on a cluster (`executor`) in
        waves: all it may start now as one job array, waited for, then again (a sweep
        not begun: every rate at once, then each mode's seeds at the rate it chose). A cell is
        tried once per run (one that failed, or that another process holds, is not retried
        here). In parallel a freed slot may start a rate that a cell still running would have
        made unneeded: the cells finished are those the serial order needs, and perhaps a few
        more. -> {cell: its directory} of the plan's finished cells."""
        taken: set[Cell] = set()
        self.failed = []
        changed = on_change or (lambda dirs, failed: None)
        if executor is not None:
            failed = []
            while ready := plan.ready(taken):
                taken.update(ready)
                self.run(ready, executor, on_change=on_change)
                failed += self.failed
            self.failed = failed
            return self.finished(plan.cells())
        if workers == 1:
            while ready := plan.ready(taken):
                taken.add(ready[0])
                self.run([ready[0]], on_change=on_change)
            return self.finished(plan.cells())
        from .workers import cell_job, run_parallel

        composed: dict[Cell, tuple[Cell, DictConfig, Path]] = {}

        def dirs() -> dict[Cell, Path]:
            return {c: self.directory(self.resolve(c)) for c in plan.cells()}

        def refill() -> list[tuple[Cell, DictConfig, Path]]:
            for cell in (ready := plan.ready(taken)):
                if cell not in composed:  # composed only: nothing is written before it starts
                    composed[cell] = (cell, *self.config(self.resolve(cell)))
            return [composed[cell] for cell in ready]

        def submitted(item: tuple[Cell, DictConfig, Path]) -> tuple[Cell, DictConfig, Path]:
            taken.add(item[0])
            return self._start(item, "[plan]")

        self.failed = run_parallel(refill(), workers, self.root / ".submitit", job=job or cell_job,
                                   refill=refill, on_submit=submitted,
                                   on_change=lambda failed: changed(dirs(), failed))
        return self.finished(plan.cells())

    def _start(self, item: tuple[Cell, DictConfig, Path], step: str) -> tuple[Cell, DictConfig, Path]:
        """A worker's cell as its job is submitted: its folder made and its config prepared."""
        cell, cfg, out = item
        out.mkdir(parents=True, exist_ok=True)
        return cell, self._prepare(cfg, out, step, cell.label), out

    @staticmethod
    def _prepare(cfg: DictConfig, out: Path, step: str, label: str) -> DictConfig:
        """A cell's train config, ready to run: its cell.json written, and resuming from its
        own last checkpoint if it was killed mid-training."""
        view = hashed_view({**OmegaConf.to_container(cfg, resolve=True), "hydra": None})
        write_cell_config(out, view)
        if has_checkpoint(out):  # killed mid-training: continue it
            with open_dict(cfg):
                cfg.resume = str(out)
        log.info("grid: %s %s %s -> %s", step, "resuming" if cfg.get("resume") else "training", label, out)
        return cfg

    def rerun(self, cell: Cell, output_dir: Path, train_missing: bool = True) -> dict | None:
        """Train a cell again from scratch into output_dir (the reproducibility check). A rerun
        that finished before is read back, not trained a third time; with train_missing=False
        a missing one gives None."""
        done = output_dir / "results.json"
        if not done.exists():
            if not train_missing:
                return None
            cfg, _ = self.config(self.resolve(cell), output_dir)
            train(cfg)
        return json.loads(done.read_text())

    def verify(self, dirs: dict[Cell, Path], count: int, train_missing: bool = True) -> list[dict]:
        """The reproducibility check: cells trained again from scratch into root/verify/. Cells
        are taken in grid order (seed-major, the same in every process); every rerun that exists
        is reported, and with train_missing more are trained until `count` exist, only of cells
        that ran on this CPU kind (results.json: machine)."""
        out, here = [], cpu_kind()
        for cell in (c for c in dirs if c.attention not in (BLIND, "mixed")):
            first = json.loads((dirs[cell] / "results.json").read_text())
            # A rerun on another CPU kind would test the hardware, not the code: same machine only.
            same = first.get("machine") in (None, here)
            again = self.rerun(cell, self.root / "verify" / dirs[cell].name,
                               train_missing and len(out) < count and same)
            if again is not None:
                out.append({"cell": cell.label, "first": first["test/bleu4"], "again": again["test/bleu4"]})
        return out


def grid_runner(spec: dict, compose: Callable[[list[str]], DictConfig], overrides: list[str]) -> GridRunner:
    """The grid of one experiment: its cells under <compare.root>/<name>/cells; every other
    experiment under the same root shares its finished cells (same hash = same run)."""
    root = Path(spec["root"]) / spec["name"]
    shared = sorted(p for p in root.parent.glob("*") if (p / "cells").is_dir() and p != root)
    return GridRunner(compose, overrides, root, spec["dim_settings"], spec["decoder_settings"], shared)
