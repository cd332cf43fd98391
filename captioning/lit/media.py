"""Per-epoch validation media for wandb and TensorBoard: sample captions and attention figures.

Nothing is decoded here: the captions and attention weights are the ones validation_step just
produced (its return value), so media cost only the figures.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pytorch_lightning as pl
from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

from ..data.images import ImageFiles

log = logging.getLogger(__name__)

# How large a validation image is shown when the run read no pixels (encoder=precomputed,
# encoder.image_size null).
SHOWN_SIZE = 224


class ValidationMedia(pl.Callback):
    """After each validation epoch (never in the sanity check): a table of sample images with
    generated and reference captions, and attention figures, for the first `num_samples`
    validation images this process decodes (the loader is not shuffled, so the same images
    every epoch and progress is visible epoch by epoch).

    Only wandb and TensorBoard loggers receive media; with neither this does nothing.
    """

    def __init__(self, *, num_samples: int, num_attention: int, every_n_epochs: int,
                 attention_scale: str) -> None:
        self.num_samples, self.num_attention = num_samples, num_attention
        self.attention_scale = attention_scale
        self.every_n_epochs = max(1, every_n_epochs)
        self.seconds: list[float] = []  # media time per epoch, for the cost report
        self._samples: list[dict] = []

    def _active(self, trainer) -> list:
        """The loggers to feed this epoch ([] = do nothing)."""
        if (trainer.sanity_checking or not trainer.is_global_zero or self.num_samples < 1
                or trainer.current_epoch % self.every_n_epochs):
            return []
        return [lg for lg in trainer.loggers if isinstance(lg, (WandbLogger, TensorBoardLogger))]

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._samples = []

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx,
                                dataloader_idx: int = 0) -> None:
        if outputs and len(self._samples) < self.num_samples and self._active(trainer):
            self._samples += outputs[: self.num_samples - len(self._samples)]

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        loggers = self._active(trainer)
        if not loggers or not self._samples:
            return
        start = time.perf_counter()
        records = [trainer.datamodule.data.records[s["index"]] for s in self._samples]
        enc = pl_module.cfg["encoder"]
        # Precomputed features: the image is shown if it is there; regions are no grid to overlay.
        overlay = enc["name"] != "precomputed"
        files = ImageFiles([r.path for r in records], enc["image_size"] or SHOWN_SIZE)
        rows, figures = [], []
        for k, (record, sample) in enumerate(zip(records, self._samples)):
            pixels, why = files[k]
            ok = not why
            image = pixels.permute(1, 2, 0).numpy() if ok else np.zeros((8, 8, 3), np.uint8)
            words = sample["hyp"]
            rows.append((record.image_id, image, " ".join(words), record.texts))
            if k < self.num_attention and ok and words and overlay:
                figures.append((record.image_id, words, _attention_array(image, words, sample["weights"],
                                                                     self.attention_scale)))
        step = trainer.global_step
        for logger in loggers:
            if isinstance(logger, WandbLogger):
                _to_wandb(logger, rows, figures, trainer.current_epoch, step)
            else:
                _to_tensorboard(logger, rows, figures, step)
        self._samples = []
        self.seconds.append(time.perf_counter() - start)
        log.debug("validation media: %.2f s", self.seconds[-1])


def _attention_array(image: np.ndarray, words: list[str], weights, scale: str) -> np.ndarray:
    """The attention figure (input + one panel per word; weights (len(words), N)) as an
    (H, W, 3) uint8 array."""
    from ..visualize import attention_canvas  # matplotlib only when media are made

    return attention_canvas(image, words, weights, scale=scale)


def _to_wandb(logger: WandbLogger, rows, figures, epoch: int, step: int) -> None:
    import wandb

    table = wandb.Table(columns=["epoch", "image_id", "image", "generated", "references"])
    for image_id, image, generated, refs in rows:
        table.add_data(epoch, str(image_id), wandb.Image(image), generated, "\n".join(refs))
    media = {"val/samples": table}
    for image_id, words, fig in figures:  # one key per image: its own step slider in the UI
        media[f"val/attention/{image_id}"] = wandb.Image(fig, caption=" ".join(words))
    logger.experiment.log({**media, "trainer/global_step": step})


def _to_tensorboard(logger: TensorBoardLogger, rows, figures, step: int) -> None:
    writer = logger.experiment
    lines = ["| image | generated | references |", "|---|---|---|"]
    lines += [f"| {i} | {g} | {' / '.join(r)} |" for i, _, g, r in rows]
    writer.add_text("val/samples", "\n".join(lines), step)
    for image_id, _, fig in figures:
        writer.add_image(f"val/attention/{image_id}", fig, step, dataformats="HWC")
