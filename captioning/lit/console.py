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


def summary_table(results: dict, name: str, out, best_path: str | None, monitor: str,
                  best_score: float | None) -> str:
    """The run's last words: the test scores (as computed, float64, not Lightning's float32
    table), where the files are, and what was skipped. Keys a dataset has no use for (attribute
    accuracy on real captions) are left out."""
    def row(label: str, value: str) -> str:
        return f"  {label:<16} {value}"

    minutes, seconds = divmod(round(results.get("wall_time_s", 0)), 60)
    lines = [f"summary: {name} ({minutes} min {seconds} s)"]
    bleu = [results.get(f"test/bleu{n}") for n in range(1, 5)]
    if all(b is not None for b in bleu):
        lines.append(row("test BLEU-1..4", " ".join(f"{b:.4f}" for b in bleu)))
    if "test/cider" in results:
        lines.append(row("test CIDEr-D", f"{results['test/cider']:.4f}"))
    if "test/attr_acc" in results:
        parts = ", ".join(f"{k} {results[f'test/attr_acc_{k}']:.3f}"
                          for k in ("colour", "shape", "size", "position")
                          if f"test/attr_acc_{k}" in results)
        acc = f"{results['test/attr_acc']:.4f}" + (f" ({parts})" if parts else "")
        lines.append(row("attribute acc", acc))
    if "test/grounding_ratio" in results:
        lines.append(row("grounding", f"{results['test/grounding_ratio']:.2f} x uniform"))
    if "test/attn_entropy" in results:
        lines.append(row("attn entropy", f"{results['test/attn_entropy']:.2f} nats"))
    if best_path:
        score = "" if best_score is None else f" ({monitor} {best_score:.4f})"
        lines.append(row("best checkpoint", f"{best_path}{score}"))
    lines.append(row("results", f"{out}/results.json, predictions.json"))
    skipped = results.get("skipped_images", 0)
    if skipped or results.get("nonfinite_skipped_batches"):
        lines.append(row("skipped", f"{skipped} images (skipped_images.txt), "
                                    f"{results.get('nonfinite_skipped_batches', 0)} non-finite batches"))
    return "\n".join(lines)
