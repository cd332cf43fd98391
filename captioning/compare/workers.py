"""Cells in parallel on one machine (`compare.workers=N`): each cell a submitit local job, its
own process, at most N at once; on a GPU machine each on its own GPU (several per GPU when N
exceeds them), else each on its share of the cores. Workers share the feature store on disk
(memory-mapped, built once under its lock), never a copy each.

A cell that fails is named with its log and the others go on; a worker killed with `kill -9`
fails only its cell, which the next run resumes from its checkpoint; SIGTERM to the grid
reaches every running cell (each checkpoints where it stands and stops). One progress line
after every change: cells done, running, left, failed, and an ETA from the finished cells' own
times."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from ..errors import UserError
from .cell_training import train_cell
from .cells import Cell
from .executor import what_failed

log = logging.getLogger(__name__)

POLL_S = 1.0
TIMEOUT_MIN = 7 * 24 * 60  # a cell runs until it finishes (the local executor's default is 2 min)
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def _stop_as_a_run_does() -> None:
    """Make this job process stop on SIGTERM as `python train.py` does. submitit's job process
    ignores SIGTERM (it logs "Bypassing signal SIGTERM" and goes on): a stop that came before
    training began, or between its stages, would be lost and the cell would train on after
    the grid said it stopped. With the default back, Lightning's own handler takes over in
    training (the cell checkpoints where it stands and stops) and elsewhere the process ends
    (the next run resumes it). And the cell gets SIGTERM when the process that started it
    dies (Linux): a killed job controller never leaves a trainer running unseen."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() == 1:  # its parent died before the call: nobody would signal it
            os.kill(os.getpid(), signal.SIGTERM)


def cell_job(cfg: DictConfig, out: Path) -> str:
    """A cell in a local worker's process: it stops on SIGTERM as a run does, and trains the
    cell under its lock (compare/cell_training.py)."""
    from ..lit import train

    _stop_as_a_run_does()
    return train_cell(cfg, out, train)


def threads_per_cell(cfgs: list[DictConfig], workers: int, cores: int | None = None) -> int:
    """Torch threads for each cell: the config's own (trainer.num_threads, a hashed setting: it
    is never changed here) or, where it leaves them free, an equal share of the cores. Refused
    when the workers would run more threads than there are cores."""
    cores = cores or os.cpu_count() or 1
    fixed = {int(c.trainer.num_threads) for c in cfgs if c.trainer.get("num_threads")}
    share = max(1, cores // workers)
    threads = max(fixed) if fixed else share
    if workers * threads > cores:
        raise UserError(f"compare.workers={workers} x trainer.num_threads={threads} is more threads "
                        f"than the {cores} cores: lower compare.workers to {max(1, cores // threads)}")
    return threads


@dataclass
class Progress:
    total: int
    done: int = 0
    failed: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # wall seconds of cells trained whole here
    # False under a plan (compare/plan.py): the cells left are those it may start now, of which
    # a sweep's choices may need fewer, so the count and its ETA are upper bounds
    decided: bool = True

    def ended(self, state: str, seconds: float, resumed: bool) -> None:
        """A cell's job ended well. Its time joins the estimate only where the job trained the
        whole cell: a resumed cell's last part, or a cell another process finished, would make
        the ETA too short."""
        self.done += 1
        if state == "trained" and not resumed:
            self.times.append(seconds)

    def line(self, running: int, left: int, workers: int) -> str:
        eta = ""
        if self.times and (running or left):
            per_cell = sum(self.times) / len(self.times)
            eta = (f"; ETA {'' if self.decided else 'at most '}"
                   f"{per_cell * (running + left) / workers / 60:.0f} min")
        return (f"grid: {self.done}/{self.total} done, {running} running, "
                f"{'' if self.decided else 'up to '}{left} left, {len(self.failed)} failed{eta}")


def slot_parameters(slot: int, gpus: int) -> dict:
    """submitit local parameters of the job in `slot`: its own GPU (several jobs per GPU when
    the slots exceed them)."""
    params = {"timeout_min": TIMEOUT_MIN, "signal_delay_s": 120}
    if gpus:
        params.update(gpus_per_node=1, visible_gpus=[slot % gpus])
    return params


@contextmanager
def thread_environment(threads: int | None) -> Iterator[None]:
    """The job started inside gets `threads` as its OpenMP/MKL thread count (its share of the
    cores): the local executor copies this process's environment into the job. (Not submitit's
    `setup` lines: they put a shell between the job and the grid, and a shell killed alone
    leaves the cell training with the grid counting it failed.)"""
    if threads is None:
        yield
        return
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    before = {k: os.environ.get(k) for k in names}
    os.environ.update({k: str(threads) for k in names})
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def signal_tree(pid: int, sig: int) -> None:
    """Send `sig` to a process and every process under it (a submitit local job is a
    controller process that runs the cell's Python: the signal must reach the cell itself).
    Children are read from /proc where there is one, else only `pid` is signalled."""
    pids, k = [pid], 0
    while k < len(pids):
        for task in Path(f"/proc/{pids[k]}/task").glob("*"):
            try:
                pids += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
        k += 1
    for p in reversed(pids):  # the cell first, then its wrappers
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def run_pool(executor, todo: list, workers: int, gpus: int, threads: int | None,
             submit: Callable, finished: Callable, stopping: list[int],
             refill: Callable[[], list] | None = None) -> None:
    """Keep up to `workers` of `todo` running: submit(item, slot) -> a job, once the slot's
    parameters are set on `executor` (a submitit LocalExecutor); finished(item, job) as each
    ends, then refill() (if given) -> the items that may start now, the new queue (a plan
    whose next items depend on the finished ones). SIGTERM to this process reaches every
    running job (each checkpoints and stops), starts no new one, and is appended to `stopping`
    (the caller's: read it in `finished`)."""
    queue, running = list(todo), {}

    def stop(signum, frame) -> None:
        stopping.append(signum)
        for _, job in running.values():  # the job's controller and the cell process under it
            signal_tree(job._process.pid, signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while (queue and not stopping) or running:  # stopped: wait for the running ones only
            while queue and len(running) < workers and not stopping:
                slot = min(set(range(workers)) - set(running))
                item = queue.pop(0)
                executor.update_parameters(**slot_parameters(slot, gpus))
                with thread_environment(threads):  # None on a GPU machine: each job its GPU
                    running[slot] = (item, submit(item, slot))
            time.sleep(POLL_S)
            for slot, (item, job) in list(running.items()):
                if job.done():
                    del running[slot]
                    finished(item, job)
                    if refill is not None and not stopping:
                        queue = list(refill())
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_parallel(todo: list[tuple[Cell, DictConfig, Path]], workers: int, folder: Path,
                 gpus: int | None = None, job=cell_job,
                 on_change: Callable[[set[str]], None] | None = None,
                 refill: Callable[[], list] | None = None,
                 on_submit: Callable[[tuple], tuple | None] | None = None) -> list[str]:
    """Train `todo`'s cells (cell, its prepared config, its dir) with up to `workers` jobs at
    once (each `job(cfg, out)` in its own process; gpus: None counts them) -> the failures, each
    "label: what (log)"; on_change(failed labels) after each start and end. refill() -> the
    items that may start now, asked after each end (a plan: compare/plan.py), on_submit(item)
    as each starts (-> the item to run, its config prepared then, or None: as it is). SIGTERM
    stops the grid with a RunFault once every running cell has checkpointed."""
    try:
        import submitit
    except ImportError:
        raise UserError('compare.workers needs submitit: pip install -e ".[cluster]"') from None
    from ..errors import RunFault
    from ..lit.faults import grid_command

    gpus = gpu_count() if gpus is None else gpus
    threads = threads_per_cell([c for _, c, _ in todo], workers) if not gpus else None
    executor = submitit.LocalExecutor(folder=str(folder))
    progress, started = Progress(len(todo), decided=refill is None), {}
    stopping: list[int] = []

    def refilled() -> list:
        items = refill()  # what may start now: the grid's total grows as a plan decides more
        progress.total = progress.done + len(progress.failed) + len(started) + len(items)
        return items

    failed_labels: set[str] = set()

    def line() -> str:
        if on_change is not None:
            on_change(failed_labels)
        return progress.line(len(started), progress.total - progress.done - len(progress.failed)
                             - len(started), workers)

    def submit(item: tuple[Cell, DictConfig, Path], slot: int):
        if on_submit is not None:
            item = on_submit(item) or item
        cell, cfg, out = item
        started[cell] = time.time()
        log.info("grid: %s started (worker %d%s) -> %s", cell.label, slot,
                 f", GPU {slot % gpus}" if gpus else f", {threads} threads", out)
        log.info("%s", line())
        return executor.submit(job, cfg, out)

    def finished(item: tuple[Cell, DictConfig, Path], done) -> None:
        cell = item[0]
        began = started.pop(cell)
        try:
            state = done.result()
            progress.ended(state, time.time() - began, resumed=bool(item[1].get("resume")))
            if state != "trained":
                log.info("grid: %s %s", cell.label, state)
        except Exception as err:  # noqa: BLE001  (named and counted; the others go on)
            if stopping:
                return  # stopped by the signal: it checkpointed, it did not fail
            what = what_failed(err)
            progress.failed.append(f"{cell.label}: {what} (log: {done.paths.stderr})")
            failed_labels.add(cell.label)
            log.error("grid: %s failed: %s (log: %s)", cell.label, what, done.paths.stderr)
        log.info("%s", line())

    run_pool(executor, todo, workers, gpus, threads, submit, finished, stopping,
             refilled if refill is not None else None)
    if stopping:
        raise RunFault(f"grid stopped: SIGTERM received; {progress.done} cells finished, each "
                       "running one checkpointed where it stood (one stopped before its first "
                       "step starts again); continue with: " + grid_command())
    return sorted(progress.failed)
