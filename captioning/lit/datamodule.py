"""LightningDataModule over the prepared (cached, raw) features."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from ..data.datasets import Collate, EvalImages, ImageCaptions
from ..data.prepare import PreparedData, load_records_and_features, prepare_data


class CaptionDataModule(pl.LightningDataModule):
    """`data` and `encoder` config dicts in; `vocab` and `normalizer` available after setup()."""

    def __init__(self, data_cfg: dict, encoder_cfg: dict) -> None:
        super().__init__()
        self.data_cfg, self.encoder_cfg = data_cfg, encoder_cfg
        self.data: PreparedData | None = None

    def prepare_data(self) -> None:
        # Generation and feature extraction write to disk: once per node, not per process.
        # train() calls this before fit() (the model needs the vocabulary); fit() calls it again.
        if self.data is None:
            load_records_and_features(self.data_cfg, self.encoder_cfg)

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            self.data = prepare_data(self.data_cfg, self.encoder_cfg)

    @property
    def vocab(self):
        return self.data.vocab

    def _loader(self, dataset, batch_size: int, shuffle: bool) -> DataLoader:
        workers = self.data_cfg.get("num_workers", 0)
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=torch.cuda.is_available(),  # faster host-to-GPU copies; no-op on CPU
            collate_fn=Collate(self.data, self.data.vocab.pad),
        )

    def train_dataloader(self) -> DataLoader:
        images = ImageCaptions(self.data, "train", self.data_cfg.get("max_caption_len", 30))
        return self._loader(images, self.data_cfg["batch_size"], shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(EvalImages(self.data, "val"), self.data_cfg["eval_batch_size"], False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(EvalImages(self.data, "test"), self.data_cfg["eval_batch_size"], False)
