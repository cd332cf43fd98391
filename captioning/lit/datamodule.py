"""LightningDataModule over the prepared (cached, raw) features."""

from __future__ import annotations

import gc

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader

from ..data.datasets import Collate, EvalImages, ImageCaptions
from ..data.prepare import PreparedData, load_records_and_features, prepare_data


def _worker_init(worker_id: int) -> None:
    """In each DataLoader worker: stop the garbage collector from walking the objects inherited
    from the main process (records, vocabulary). A collection writes into every object it visits,
    which copies each inherited memory page into the worker: per-worker memory would grow with
    the dataset. Then Lightning's per-worker seeding, as without a worker_init_fn."""
    gc.freeze()
    pl_worker_init_function(worker_id)


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
            worker_init_fn=_worker_init,
        )

    def train_dataloader(self) -> DataLoader:
        images = ImageCaptions(self.data, "train", self.data_cfg.get("max_caption_len", 30))
        return self._loader(images, self.data_cfg["batch_size"], shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(EvalImages(self.data, "val"), self.data_cfg["eval_batch_size"], False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(EvalImages(self.data, "test"), self.data_cfg["eval_batch_size"], False)
