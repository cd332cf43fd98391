"""Torch datasets over prepared features: (image, caption) pairs for training, images with all
their references for evaluation; one collate that pads captions. With encoder fine-tuning the
items carry the image itself (read per batch, augmented for training) instead of a store row."""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch.utils.data import Dataset

from .augment import MIRRORED, augment, draw_generator, mirror_tokens
from .images import MAX_PIXELS, ImageFiles
from .prepare import PreparedData

log = logging.getLogger(__name__)


def record_images(data: PreparedData, size: int, max_pixels: int = MAX_PIXELS) -> ImageFiles:
    """The records' image files read for the encoder: item k = record k's (3, size, size) uint8
    and "" or why it cannot be used. The paths were confined to the image root when the store
    was built."""
    return ImageFiles([r.path for r in data.records], size, max_pixels)


class ImageCaptions(Dataset):
    """Each image of a split with all its reference captions, encoded <bos> ... <eos>.

    One item per image (not per pair): the decoder prepares an image's keys once and
    reuses them for all of its captions. An epoch still sees every pair once. The encoded
    captions live in one flat int32 array (with offsets), not as one tensor per caption: a few
    bytes per token instead of hundreds per object, and nothing for the garbage collector of a
    DataLoader worker to touch (which would copy the pages it inherited).
    """

    def __init__(self, data: PreparedData, split: str, max_len: int = 30,
                 captions_per_image: int | None = None) -> None:
        self.data = data
        self.images = np.asarray(data.split_indices(split), dtype=np.int64)  # (I,) record indices
        keep = slice(captions_per_image)  # None: all of them (debug=overfit keeps the first)
        encoded = [data.vocab.encode(c[:max_len])
                   for i in self.images for c in data.records[i].captions[keep]]
        per_image = [len(data.records[i].captions[keep]) for i in self.images]
        self.tokens = np.fromiter((t for e in encoded for t in e), dtype=np.int32)  # all tokens
        self.caption_start = np.cumsum([0] + [len(e) for e in encoded])  # (captions + 1,)
        self.image_start = np.cumsum([0] + per_image)  # (I + 1,) first caption of each image

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, k: int) -> dict:
        first, last = self.image_start[k], self.image_start[k + 1]
        bounds = self.caption_start[first : last + 1]
        captions = [torch.from_numpy(self.tokens[a:b].astype(np.int64))
                    for a, b in zip(bounds[:-1], bounds[1:])]
        return {"index": int(self.images[k]), "tokens": captions}


class AugmentedImageCaptions(ImageCaptions):
    """ImageCaptions whose items also carry the image, read from its file and augmented
    (data/augment.py): keys are (epoch, k) pairs (EpochShuffle(with_epoch=True)), so the draw is
    a function of (seed, epoch, image) and a resumed run repeats it."""

    def __init__(self, data: PreparedData, split: str, files: ImageFiles, seed: int,
                 crop_scale: tuple[float, float] = (1.0, 1.0), flip: bool = True, max_len: int = 30,
                 captions_per_image: int | None = None) -> None:
        super().__init__(data, split, max_len, captions_per_image)
        self.files, self.seed, self.crop_scale, self.flip = files, seed, tuple(crop_scale), flip
        stoi = data.vocab.stoi
        self.swap = {stoi[a]: stoi[b] for a, b in MIRRORED.items() if a in stoi and b in stoi}

    def __getitem__(self, key: tuple[int, int]) -> dict:
        epoch, k = key
        item = super().__getitem__(k)
        image, why = self.files[item["index"]]
        if not why:
            g = draw_generator(self.seed, epoch, item["index"])
            image, mirrored = augment(image, g, self.crop_scale, self.flip)
            if mirrored:
                item["tokens"] = [mirror_tokens(t, self.swap) for t in item["tokens"]]
        return {**item, "image": image, "why": why}


class EvalImages(Dataset):
    """Each image of a split once, with all its references (words) and ground-truth objects;
    with `files` (a fine-tuned encoder) also the image, as it is (no augmentation)."""

    def __init__(self, data: PreparedData, split: str, files: ImageFiles | None = None) -> None:
        self.data, self.indices, self.files = data, data.split_indices(split), files

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int) -> dict:
        i = self.indices[k]
        r = self.data.records[i]
        item = {"index": i, "refs": r.captions, "objects": r.objects, "image_id": r.image_id}
        if self.files is not None:
            item["image"], item["why"] = self.files[i]
        return item


class Collate:
    """Raw features per image (stored dtype; the model normalises); all captions padded with
    <pad> into one (B, T) tensor with `image_index` (B,) pointing at each caption's image;
    python lists stay lists."""

    def __init__(self, data: PreparedData, pad: int) -> None:
        self.data, self.pad = data, pad

    def __call__(self, items: list[dict]) -> dict:
        if "image" in items[0]:  # fine-tuning: images, not store rows
            for it in items:
                if it["why"]:  # readable when the store was built, not now: skip it
                    log.warning("skipped an unreadable image in this batch: %s: %s",
                                self.data.records[it["index"]].path, it["why"])
            items = [it for it in items if not it["why"]]
        index = torch.tensor([it["index"] for it in items])
        if "image" in items[0]:
            batch = {"index": index, "images": torch.stack([it["image"] for it in items])}  # (B, 3, H, W)
        else:
            batch = {"index": index, **self.data.batch_features(index.numpy())}  # (B, N, C) [, mask, boxes]
        if "tokens" in items[0]:
            captions = [c for it in items for c in it["tokens"]]
            batch["tokens"] = torch.nn.utils.rnn.pad_sequence(
                captions, batch_first=True, padding_value=self.pad
            )  # (B, T)
            batch["image_index"] = torch.tensor(
                [k for k, it in enumerate(items) for _ in it["tokens"]]
            )  # (B,)
        for key in ("refs", "objects", "image_id"):
            if key in items[0]:
                batch[key] = [it[key] for it in items]
        return batch
