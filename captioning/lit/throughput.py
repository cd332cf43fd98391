"""What a run costs: captions/s and images/s per optimisation step, and the CPU time of the
whole run, killed and resumed parts included."""

from __future__ import annotations

import time

import pytorch_lightning as pl


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and its reaped children (DataLoader workers)."""
    try:
        import resource
    except ImportError:  # Windows: this process only
        return time.process_time()
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class ComputeClock(pl.Callback):
    """The CPU and wall seconds a run has used, kept in every checkpoint, so that a resumed
    run's cost counts its killed parts (each up to its last checkpoint: what ran after it is
    redone and counted again) and not the time between them. `start`: this process's
    cpu_seconds() when the run began; `wall_start`: its time.time() then."""

    def __init__(self, start: float, wall_start: float) -> None:
        self.start, self.before = start, 0.0  # before: the earlier parts' CPU seconds
        self.wall_start, self.wall_before = wall_start, 0.0  # wall_before: their wall seconds

    def state_dict(self) -> dict:
        return {"cpu_s": self.before + cpu_seconds() - self.start,
                "wall_s": self.wall_before + time.time() - self.wall_start}

    def load_state_dict(self, state: dict) -> None:
        self.before = float(state.get("cpu_s", 0.0))
        self.wall_before = float(state.get("wall_s", 0.0))  # absent in older checkpoints


class Throughput(pl.Callback):
    """train/captions_per_s and train/images_per_s, timed around each optimisation step
    (forward, backward, optimiser; data loading excluded)."""

    def __init__(self) -> None:
        self.step_seconds: list[float] = []  # every step, for results.json (first = compile)
        self.step_captions: list[int] = []  # captions per step (the same steps)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        seconds = max(time.perf_counter() - self._start, 1e-9)
        self.step_seconds.append(seconds)
        self.step_captions.append(len(batch["tokens"]))
        pl_module.log_dict(
            {"train/captions_per_s": len(batch["tokens"]) / seconds,
             "train/images_per_s": len(batch["index"]) / seconds},
            on_step=True, on_epoch=False, batch_size=len(batch["tokens"]),
        )

    def captions_per_s(self) -> float | None:
        """Training captions per second of optimisation steps, the first step (compilation,
        warm-up) left out; None before two steps."""
        if len(self.step_seconds) < 2:
            return None
        return sum(self.step_captions[1:]) / sum(self.step_seconds[1:])
