"""Torch datasets over prepared features: (image, caption) pairs for training, images with all
their references for evaluation; one collate that pads captions."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from .prepare import PreparedData


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


class EvalImages(Dataset):
    """Each image of a split once, with all its references (words) and ground-truth objects."""

    def __init__(self, data: PreparedData, split: str) -> None:
        self.data, self.indices = data, data.split_indices(split)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int) -> dict:
        i = self.indices[k]
        r = self.data.records[i]
        return {"index": i, "refs": r.captions, "objects": r.objects, "image_id": r.image_id}


class Collate:
    """Raw features per image (stored dtype; the model normalises); all captions padded with
    <pad> into one (B, T) tensor with `image_index` (B,) pointing at each caption's image;
    python lists stay lists."""

    def __init__(self, data: PreparedData, pad: int) -> None:
        self.data, self.pad = data, pad

    def __call__(self, items: list[dict]) -> dict:
        index = torch.tensor([it["index"] for it in items])
        batch = {"index": index, "features": self.data.raw_features(index.numpy())}  # (B, N, C)
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
