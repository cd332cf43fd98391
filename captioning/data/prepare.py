"""Everything between a dataset on disk and tensors a model can train on, without Lightning:
find/generate the dataset, cache encoder features, build the vocabulary, fit the normaliser.

Features stay as the encoder wrote them (raw, float16, memory-mapped from the cache): the
model normalises each batch itself, so no normalised or filtered copy of the dataset is made.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..models.encoder import build_encoder
from ..models.normalizer import FeatureNormalizer, fit_normalizer
from .features import cached_features
from .karpathy import ImageRecord, load_karpathy
from .synthetic import SyntheticConfig, generate
from .vocab import Vocabulary

log = logging.getLogger(__name__)

# The normaliser is fitted on at most this many training feature rows (grid cells): enough for
# a 2048 x 2048 covariance, and a bounded cost whatever the dataset's size.
FIT_ROWS = 100_000


@dataclass
class PreparedData:
    records: list[ImageRecord]  # readable images only
    features: np.ndarray  # (rows, N, C) raw encoder features, float16, as cached (memmap)
    rows: np.ndarray  # (len(records),) each record's row in `features`
    skipped: list[str]  # unreadable image files, reported, never dropped silently
    vocab: Vocabulary | None = None  # built from the training captions (training only)
    normalizer: FeatureNormalizer | None = None  # fitted on training features (training only)

    def split_indices(self, split: str) -> list[int]:
        return [i for i, r in enumerate(self.records) if r.split == split]

    def raw_features(self, indices) -> torch.Tensor:
        """Raw features of records `indices`: (B, N, C) in the stored dtype (the model's
        normaliser casts; half the bytes to copy to a GPU)."""
        return torch.from_numpy(np.ascontiguousarray(self.features[self.rows[np.asarray(indices)]]))


def resolve_json(data_cfg: dict) -> tuple[Path, Path | None]:
    """The dataset JSON (generating the built-in dataset on first use) and the image root."""
    if data_cfg.get("synthetic"):
        return generate(data_cfg["root"], SyntheticConfig(**data_cfg["synthetic"])), None
    if not data_cfg.get("json_path"):
        raise ValueError(f"data.json_path is not set for data={data_cfg.get('name')}")
    root = data_cfg.get("image_root")
    return Path(data_cfg["json_path"]), Path(root) if root else None


def load_records_and_features(data_cfg: dict, enc_cfg: dict):
    """Records and raw features (cached); run once per machine (Lightning's prepare_data)."""
    json_path, image_root = resolve_json(data_cfg)
    records = load_karpathy(json_path, image_root)
    encoder = build_encoder(enc_cfg)  # cheap to build; its weights id keys the cache
    key = {
        "dataset": str(json_path.resolve()),
        "dataset_mtime": json_path.stat().st_mtime_ns,
        "encoder": enc_cfg["name"],
        "weights": encoder.weights_id,
    }
    feats, valid = cached_features(
        data_cfg["cache_dir"], key, [r.path for r in records], lambda: encoder,
        enc_cfg["image_size"], enc_cfg.get("batch_size", 64), enc_cfg.get("num_workers", 1),
    )
    return records, feats, valid


def load_features(data_cfg: dict, enc_cfg: dict) -> PreparedData:
    """Records and raw features; unreadable images are left out and reported by name."""
    records, feats, valid = load_records_and_features(data_cfg, enc_cfg)
    skipped = [str(r.path) for r, ok in zip(records, valid) if not ok]
    if skipped:
        log.warning(
            "skipped %d unreadable image(s) (first: %s); they are excluded from every split",
            len(skipped), ", ".join(skipped[:5]),
        )
    keep = np.flatnonzero(valid)
    return PreparedData([records[i] for i in keep], feats, keep, skipped)


def prepare_data(data_cfg: dict, enc_cfg: dict) -> PreparedData:
    """load_features, then the vocabulary from the training captions and the normaliser
    fitted on training features."""
    data = load_features(data_cfg, enc_cfg)
    train = data.split_indices("train")
    if not train:
        raise ValueError("the dataset has no readable training images")
    data.vocab = Vocabulary.build(
        (c for i in train for c in data.records[i].captions), data_cfg.get("min_word_freq", 1)
    )
    data.normalizer = _fit(data, train, data_cfg, enc_cfg)
    return data


def _fit(data: PreparedData, train: list[int], data_cfg: dict, enc_cfg: dict) -> FeatureNormalizer:
    """The normaliser fitted on a seeded random sample of at most FIT_ROWS training grid cells,
    read from the store (never a copy of the training split)."""
    cells = data.features.shape[1]
    # A fixed permutation of all (training image, cell) positions; its first FIT_ROWS are read.
    pick = torch.randperm(len(train) * cells, generator=torch.Generator().manual_seed(0))[:FIT_ROWS]
    image, cell = (pick // cells).numpy(), (pick % cells).numpy()
    rows = data.rows[np.asarray(train)[image]]
    sample = torch.from_numpy(np.asarray(data.features[rows, cell]))  # (<= FIT_ROWS, C)
    mean, transform = fit_normalizer(
        sample, enc_cfg.get("normalize", "pca_whiten"), enc_cfg.get("pca_dim"),
        enc_cfg.get("whiten_eps", 0.0),
    )
    blind = data_cfg.get("blind", False)
    return FeatureNormalizer(transform.shape[0], transform.shape[1], blind).set(mean, transform)
