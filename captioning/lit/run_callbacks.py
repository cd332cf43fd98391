"""The callbacks a training run is built with, from its config: the checkpoint policy, the
random-state saver, throughput and media, the epoch line, the validation curve and epoch
snapshots, the learning-rate monitor (with a logger), early stopping (`early_stopping.patience`,
on a smoothed curve with `early_stopping.smoothing`)
and the user's own (the `callbacks` group, after ours); and what they tell about the run's
course once it is fitted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import hydra
import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback, EarlyStopping, LearningRateMonitor, ModelCheckpoint

from .checkpoint_policy import RNGState, checkpoint_callbacks
from .console import EpochLine
from .learning_curve import EpochSnapshots, ValidationCurve
from .media import ValidationMedia
from .throughput import ComputeClock, Throughput


@dataclass
class RunCallbacks:
    best: ModelCheckpoint  # best.ckpt: its monitor selects the checkpoint that is tested
    throughput: Throughput
    media: ValidationMedia
    curve: ValidationCurve
    snapshot_epochs: list[int]
    early: EarlyStopping | None
    clock: ComputeClock
    all: list[Callback] = field(default_factory=list)  # in the order the Trainer runs them

    @classmethod
    def from_config(cls, plain: dict, out: Path, logging: bool, cpu_start: float,
                    wall_start: float) -> RunCallbacks:
        checkpoints = checkpoint_callbacks(out, plain)
        best = checkpoints[0]
        throughput, media = Throughput(), ValidationMedia(**plain["media"])
        stop = plain.get("early_stopping") or {}
        curve = ValidationCurve(best.monitor, stop.get("smoothing") or 1)
        snapshot_epochs = list((plain.get("checkpoint") or {}).get("snapshot_epochs") or [])
        clock = ComputeClock(cpu_start, wall_start)
        callbacks = [*checkpoints, RNGState(), throughput, media, EpochLine(best), curve,
                     EpochSnapshots(out, snapshot_epochs), clock]
        if logging:
            callbacks.append(LearningRateMonitor(logging_interval="step"))
        # The callbacks group (conf/callbacks/): the user's own, after ours; null entries are off.
        callbacks += [hydra.utils.instantiate(spec) for spec in (plain.get("callbacks") or {}).values()
                      if spec]
        early = None
        if stop.get("patience") is not None:
            # on the smoothed curve where asked: one lucky or unlucky validation neither ends a
            # run nor keeps it going; best.ckpt is still the best single validation
            monitor = curve.smoothed_name if curve.smoothing > 1 else best.monitor
            early = EarlyStopping(monitor=monitor, mode=best.mode, patience=stop["patience"],
                                  min_delta=stop["min_delta"])
            callbacks.append(early)
        return cls(best, throughput, media, curve, snapshot_epochs, early, clock, callbacks)

    def course(self, trainer: pl.Trainer) -> dict:
        """The run's course (read after fit and before testing, which restores the callbacks'
        states from the tested checkpoint): the epoch best.ckpt is from, every validation's
        scores, how many epochs ran (a resumed run counts the killed run's too) and the epoch
        early stopping ended the run after (None: it did not), and the CPU and wall seconds of
        the run's earlier (killed) parts."""
        stopped = self.early.stopped_epoch if self.early is not None else 0  # 0-based; 0 = not stopped
        best = self.curve.best(self.best.monitor, self.best.mode)
        return {"best_epoch": best["epoch"] if best else None, "val_curve": list(self.curve.curve),
                "epochs_trained": trainer.fit_loop.epoch_progress.current.completed,
                "stopped_early_after": stopped + 1 if stopped else None,
                "cpu_s_earlier_parts": round(self.clock.before, 1),
                "wall_time_s_earlier_parts": round(self.clock.wall_before, 2)}
