"""Everything between a dataset on disk and tensors a decoder can train on, without Lightning:
find/generate the dataset, build the vocabulary, cache encoder features, fit the normaliser."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..models.captioner import FeatureNormalizer, fit_normalizer
from ..models.encoder import ResNetEncoder
from .features import cached_features
from .karpathy import ImageRecord, load_karpathy
from .synthetic import SyntheticConfig, generate
from .vocab import Vocabulary

log = logging.getLogger(__name__)


@dataclass
class PreparedData:
    records: list[ImageRecord]  # valid images only
    features: torch.Tensor  # (M, N, D) normalised, float16 to halve memory
    vocab: Vocabulary
    normalizer: FeatureNormalizer
    skipped: list[str]  # unreadable image files, reported not dropped silently

    def split_indices(self, split: str) -> list[int]:
        return [i for i, r in enumerate(self.records) if r.split == split]


def resolve_json(data_cfg: dict) -> tuple[Path, Path | None]:
    """The dataset JSON (generating the built-in dataset on first use) and the image root."""
    if data_cfg.get("synthetic"):
        return generate(data_cfg["root"], SyntheticConfig(**data_cfg["synthetic"])), None
    if not data_cfg.get("json_path"):
        raise ValueError(f"data.json_path is not set for data={data_cfg.get('name')}")
    root = data_cfg.get("image_root")
    return Path(data_cfg["json_path"]), Path(root) if root else None


def build_encoder(enc_cfg: dict) -> ResNetEncoder:
    """The frozen feature extractor described by the `encoder` config group."""
    return ResNetEncoder(
        enc_cfg["name"], enc_cfg.get("pretrained", False), enc_cfg.get("weights_path"),
        enc_cfg.get("init_seed", 0),
    )


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


def prepare_data(
    data_cfg: dict,
    enc_cfg: dict,
    vocab: Vocabulary | None = None,
    normalizer: FeatureNormalizer | None = None,
) -> PreparedData:
    """Load (or compute) features, drop and report unreadable images, build the vocabulary
    from training captions (unless given), fit the normaliser on training features (unless
    given, e.g. a checkpoint's) and apply it."""
    records, feats, valid = load_records_and_features(data_cfg, enc_cfg)
    skipped = [str(r.path) for r, ok in zip(records, valid) if not ok]
    if skipped:
        log.warning(
            "skipped %d unreadable image(s) (first: %s); they are excluded from every split",
            len(skipped), ", ".join(skipped[:5]),
        )
    keep = np.flatnonzero(valid)
    records = [records[i] for i in keep]
    raw = torch.from_numpy(np.ascontiguousarray(feats[keep]))  # (M, N, C) float16
    train = [i for i, r in enumerate(records) if r.split == "train"]
    if not train:
        raise ValueError("the dataset has no readable training images")
    if vocab is None:
        vocab = Vocabulary.build(
            (c for i in train for c in records[i].captions), data_cfg.get("min_word_freq", 1)
        )
    if normalizer is None:
        normalizer = _fit(raw[train], data_cfg, enc_cfg)
    with torch.no_grad():
        features = torch.cat([normalizer(raw[i : i + 512]).half() for i in range(0, len(raw), 512)])
    return PreparedData(records, features, vocab, normalizer, skipped)


def _fit(train_feats: torch.Tensor, data_cfg: dict, enc_cfg: dict) -> FeatureNormalizer:
    """The normaliser fitted on training positions (at most 100k rows keep the covariance cheap)."""
    rows = train_feats.flatten(0, 1)
    rows = rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))[:100_000]]
    mean, transform = fit_normalizer(
        rows, enc_cfg.get("normalize", "pca_whiten"), enc_cfg.get("pca_dim"),
        enc_cfg.get("whiten_eps", 0.0),
    )
    normalizer = FeatureNormalizer(transform.shape[0], transform.shape[1], data_cfg.get("blind", False))
    normalizer.mean.copy_(mean)
    normalizer.transform.copy_(transform)
    return normalizer
