"""Training throughput: captions/s and images/s per optimisation step."""

from __future__ import annotations

import time

import pytorch_lightning as pl


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
