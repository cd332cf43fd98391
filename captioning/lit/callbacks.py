"""Callbacks that feed the loggers: training throughput, and per-epoch validation media (sample
captions, attention heat maps) for wandb and TensorBoard."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

from ..data.features import ImageFiles
from ..models.decoding import decode_batch

log = logging.getLogger(__name__)


class Throughput(pl.Callback):
    """train/captions_per_s and train/images_per_s, timed around each optimisation step
    (forward, backward, optimiser; data loading excluded)."""

    def __init__(self) -> None:
        self.step_seconds: list[float] = []  # every step, for results.json (first = compile)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        seconds = max(time.perf_counter() - self._start, 1e-9)
        self.step_seconds.append(seconds)
        pl_module.log_dict(
            {"train/captions_per_s": len(batch["tokens"]) / seconds,
             "train/images_per_s": len(batch["features"]) / seconds},
            on_step=True, on_epoch=False, batch_size=len(batch["tokens"]),
        )


class ValidationMedia(pl.Callback):
    """After each validation epoch (never in the sanity check): a table of sample images with
    generated and reference captions, and attention figures, for a fixed set of validation
    images, so the same pictures show the model's progress epoch by epoch.

    Only wandb and TensorBoard loggers receive media; with neither this does nothing.
    """

    def __init__(self, num_samples: int = 8, num_attention: int = 2, every_n_epochs: int = 1) -> None:
        self.num_samples, self.num_attention = num_samples, num_attention
        self.every_n_epochs = max(1, every_n_epochs)
        self.seconds: list[float] = []  # media time per epoch, for the cost report

    def _targets(self, trainer) -> list:
        return [lg for lg in trainer.loggers if isinstance(lg, (WandbLogger, TensorBoardLogger))]

    @torch.no_grad()
    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        loggers = self._targets(trainer)
        if (trainer.sanity_checking or not loggers or not trainer.is_global_zero
                or self.num_samples < 1 or trainer.current_epoch % self.every_n_epochs):
            return
        start = time.perf_counter()
        data, vocab = trainer.datamodule.data, pl_module.vocab
        index = data.split_indices("val")[: self.num_samples]  # fixed: same images every epoch
        records = [data.records[i] for i in index]
        features = data.features[index].float().to(pl_module.device)  # (S, N, D)
        settings = {**pl_module.cfg["decode"], "beam_size": 1}
        was_training = pl_module.training
        pl_module.eval()
        ids, weights = decode_batch(pl_module.model.decoder, features, vocab.bos, vocab.eos,
                                    vocab.pad, settings)
        pl_module.train(was_training)
        files = ImageFiles([r.path for r in records], pl_module.cfg["encoder"]["image_size"])
        rows, figures = [], []
        for k, (record, tok, w) in enumerate(zip(records, ids, weights)):
            pixels, ok = files[k]
            image = pixels.permute(1, 2, 0).numpy() if ok else np.zeros((8, 8, 3), np.uint8)
            words, w = vocab.decode_aligned(tok, w)
            refs = [" ".join(c) for c in record.captions]
            rows.append((record.image_id, image, " ".join(words), refs))
            if k < self.num_attention and ok and words:
                figures.append((record.image_id, words, attention_array(image, words, w)))
        step = trainer.global_step
        for logger in loggers:
            if isinstance(logger, WandbLogger):
                _to_wandb(logger, rows, figures, trainer.current_epoch, step)
            else:
                _to_tensorboard(logger, rows, figures, step)
        self.seconds.append(time.perf_counter() - start)
        log.debug("validation media: %.2f s", self.seconds[-1])


def attention_array(image: np.ndarray, words: list[str], weights: torch.Tensor) -> np.ndarray:
    """The attention figure (input + one panel per word; weights (len(words), N)) as an
    (H, W, 3) uint8 array."""
    from ..visualize import attention_canvas

    return attention_canvas(image, words, weights)


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
