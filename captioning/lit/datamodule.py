"""LightningDataModule over the prepared (cached, raw) features."""

from __future__ import annotations

import gc
import os

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader, DistributedSampler

from ..data.datasets import AugmentedImageCaptions, Collate, EvalImages, ImageCaptions, record_images
from ..data.images import ImageFiles
from ..data.prepare import PreparedData, dataset_features, prepare_data
from ..data.sampler import EpochShuffle


def _worker_init(worker_id: int) -> None:
    """In each DataLoader worker: stop the garbage collector from walking the objects inherited
    from the main process (records, vocabulary). A collection writes into every object it visits,
    which copies each inherited memory page into the worker: per-worker memory would grow with
    the dataset. Then Lightning's per-worker seeding, as without a worker_init_fn."""
    gc.freeze()
    pl_worker_init_function(worker_id)


def images_reached(trainer_cfg: dict, data_cfg: dict) -> dict[str, int]:
    """{split: images} for the splits whose batches are limited to a number
    (trainer.limit_*_batches an int: debug presets): a limited split is read from its first
    batches x batch size x processes images only, so only those are extracted. Evaluation
    splits are read in order, so their limited batches are exactly those images; the training
    split's batches are then drawn, each epoch, from those images, not from the whole split."""
    devices, nodes = trainer_cfg.get("devices"), trainer_cfg.get("num_nodes") or 1
    world = (devices if isinstance(devices, int) and devices > 0 else 1) * nodes
    fast = trainer_cfg.get("fast_dev_run")  # true or N: N batches of every stage
    fast = int(fast) if isinstance(fast, bool | int) and fast else None
    out = {}
    for split, size in (("train", data_cfg["batch_size"]), ("val", data_cfg["eval_batch_size"]),
                        ("test", data_cfg["eval_batch_size"])):
        limit = fast or trainer_cfg.get(f"limit_{split}_batches")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            out[split] = limit * size * world
    return out


class CaptionDataModule(pl.LightningDataModule):
    """`data` and `encoder` config dicts in; `vocab` and `normalizer` available after setup().

    Resumable: the training order is EpochShuffle(seed), and the checkpoint holds how many
    training batches of which epoch were consumed (counted here, as batches reach the model: the
    loader's own position runs ahead by its prefetch), so a resumed run's next batch is the one
    the killed run would have trained on next."""

    def __init__(self, data_cfg: dict, encoder_cfg: dict, seed: int = 0,
                 first: dict[str, int] | None = None) -> None:
        super().__init__()
        self.data_cfg, self.encoder_cfg, self.seed = data_cfg, encoder_cfg, seed
        self.first = first  # each split's first images only (images_reached)
        self.data: PreparedData | None = None
        self.position = {"epoch": 0, "batches": 0}  # training batches consumed in that epoch
        self._resume: dict | None = None
        self.restore_position = True  # False only in the test that shows why it is needed

    def prepare_data(self) -> None:
        # Generation and feature extraction write to disk: once per node, not per process.
        # train() calls this before fit() (the model needs the vocabulary); fit() calls it again.
        if self.data is None:
            dataset_features(self.data_cfg, self.encoder_cfg, training=True, first=self.first)

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            self.data = prepare_data(self.data_cfg, self.encoder_cfg, self.first)

    @property
    def vocab(self):
        return self.data.vocab

    def state_dict(self) -> dict:
        per_epoch = self.trainer.num_training_batches if self.trainer is not None else None
        finished = per_epoch is not None and self.position["batches"] >= per_epoch
        return {**self.position, "finished": bool(finished), "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        self._resume = state if self.restore_position else None

    def on_before_batch_transfer(self, batch: dict, dataloader_idx: int) -> dict:
        if self.trainer is not None and self.trainer.training:
            epoch = self.trainer.current_epoch
            if epoch != self.position["epoch"]:
                self.position = {"epoch": epoch, "batches": 0}
            self.position["batches"] += 1
        return batch

    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _workers(self) -> int:
        """data.num_workers, or for `auto`: none on a CPU (the step needs every core), on an
        accelerator min(4, CPUs per process - 1), so reading the next batches overlaps the
        device's step."""
        setting = self.data_cfg["num_workers"]
        if setting != "auto":
            return int(setting)
        trainer = self.trainer
        if trainer is None or trainer.strategy.root_device.type == "cpu":
            return 0
        return max(0, min(4, (os.cpu_count() or 1) // max(1, trainer.num_devices) - 1))

    def _loader(self, dataset, batch_size: int, sampler) -> DataLoader:
        workers = self._workers()
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            # Its own generator for the workers' base seed: creating an iterator then never
            # draws from the global RNG, whose stream (dropout) a resume restores exactly.
            generator=torch.Generator().manual_seed(self.seed),
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=torch.cuda.is_available(),  # faster host-to-GPU copies; no-op on CPU
            collate_fn=Collate(self.data, self.data.vocab.pad),
            worker_init_fn=_worker_init,
        )

    @property
    def finetune(self) -> bool:
        """encoder.finetune: batches carry images (the feature store only fits the normaliser)."""
        return bool(self.encoder_cfg.get("finetune"))

    def _files(self) -> ImageFiles:
        return record_images(self.data, self.encoder_cfg["image_size"],
                             self.data_cfg["max_image_pixels"])

    def _train_images(self):
        max_len, per_image = self.data_cfg["max_caption_len"], self.data_cfg["captions_per_image"]
        if self.finetune:
            enc = self.encoder_cfg
            augment = enc["augment"]
            return AugmentedImageCaptions(
                self.data, "train", self._files(), self.seed,
                enc["crop_scale"] if augment else (1.0, 1.0), augment, max_len, per_image)
        return ImageCaptions(self.data, "train", max_len, per_image)

    def first_train_batches(self, count: int) -> list[dict]:
        """The first `count` training batches in split order (no sampler, no workers), collated
        as training batches: batches of this run's shapes, e.g. to time steps on."""
        images, size = self._train_images(), self.data_cfg["batch_size"]
        collate = Collate(self.data, self.data.vocab.pad)
        starts = range(0, min(count * size, len(images)), size)
        return [collate([images[i] for i in range(start, min(start + size, len(images)))])
                for start in starts]

    def train_dataloader(self) -> DataLoader:
        images = self._train_images()
        batch_size = self.data_cfg["batch_size"]
        # The trainer runs with use_distributed_sampler=false: this sampler shards by rank itself.
        sampler = EpochShuffle(len(images), self.seed, *self._rank_world(), with_epoch=self.finetune)
        if self._resume is not None:  # continue where the checkpoint's run stopped
            epoch, done = self._resume["epoch"], self._resume["batches"]
            if self._resume["finished"]:  # saved at the epoch's end: the next one starts
                epoch, done = epoch + 1, 0
            sampler.start_at(epoch, done * batch_size)
            self.position = {"epoch": epoch, "batches": done}
            self._resume = None
        return self._loader(images, batch_size, sampler)

    def _eval_loader(self, split: str) -> DataLoader:
        images = EvalImages(self.data, split, self._files() if self.finetune else None)
        rank, world = self._rank_world()
        # Each rank decodes its share; the module gathers and de-duplicates (padding repeats).
        sampler = DistributedSampler(images, world, rank, shuffle=False) if world > 1 else None
        return self._loader(images, self.data_cfg["eval_batch_size"], sampler)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")
