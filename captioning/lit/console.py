"""One console line per validation epoch: the monitored score, the best so far, attribute
accuracy and the epoch's time (the progress bar shows nothing of validation)."""

from __future__ import annotations

import logging
import time

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback, ModelCheckpoint

log = logging.getLogger("captioning")


class EpochLine(Callback):
    """`epoch 2/7: val/bleu4 0.4123 (best 0.4230), val/attr_acc 0.611, 38 s` after each
    validation (rank 0, not the sanity check). The best comes from the checkpoint callback that
    keeps best.ckpt, so it survives a resume."""

    def __init__(self, best: ModelCheckpoint) -> None:
        self.best = best
        self._start = time.time()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.time()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        monitor = self.best.monitor
        parts = []
        if monitor in metrics:
            # The checkpoint callback updates its best after this hook: compare here.
            value, best = float(metrics[monitor]), self.best.best_model_score
            better = max if self.best.mode == "max" else min
            if best is None or better(value, float(best)) == value:
                parts.append(f"{monitor} {value:.4f} (new best)")
            else:
                parts.append(f"{monitor} {value:.4f} (best {float(best):.4f})")
        if "val/attr_acc" in metrics:
            parts.append(f"val/attr_acc {float(metrics['val/attr_acc']):.3f}")
        log.info("epoch %d/%d: %s, %.0f s", trainer.current_epoch + 1, trainer.max_epochs,
                 ", ".join(parts) or "no validation metrics", time.time() - self._start)


class _NoPromotion(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


def quiet_lightning() -> None:
    """Drop Lightning's advertisement line (once per trainer); its useful messages stay."""
    target = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    if not any(isinstance(f, _NoPromotion) for f in target.filters):
        target.addFilter(_NoPromotion())
