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

from ..models.encoder import ResNetEncoder, build_encoder
from ..models.normalizer import FeatureNormalizer, fit_normalizer
from .features import open_store, stored_features
from .images import MAX_PIXELS
from .store import FeatureStore, LazyFeatures
from .karpathy import ImageRecord, image_root_of, load_karpathy
from .synthetic import SyntheticConfig, generate
from .vocab import Vocabulary

log = logging.getLogger(__name__)

# The normaliser is fitted on at most this many training feature rows (grid cells): enough for
# a 2048 x 2048 covariance, and a bounded cost whatever the dataset's size.
FIT_ROWS = 100_000


@dataclass
class PreparedData:
    records: list[ImageRecord]  # readable images only
    features: LazyFeatures  # (rows, N, C) raw encoder features, float16, memory-mapped store
    rows: np.ndarray  # (len(records),) each record's row in `features`
    skipped: list[tuple[str, str]]  # (image file, why): reported by name, never dropped silently
    empty_captions: int = 0  # captions dropped because no token was left
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


def _dataset(data_cfg: dict, enc_cfg: dict) -> tuple[list[ImageRecord], ResNetEncoder, dict]:
    """Records, the (not yet run) encoder, and the arguments that locate the dataset's store."""
    json_path, image_root = resolve_json(data_cfg)
    records = load_karpathy(json_path, image_root)
    root = image_root_of(json_path, image_root)
    _check_files_exist(records, root)
    encoder = build_encoder(enc_cfg)  # cheap to build; its weights id keys the store
    key = {
        "dataset": str(json_path.resolve()),
        "dataset_mtime": json_path.stat().st_mtime_ns,
        "encoder": enc_cfg["name"],
        "weights": encoder.weights_id,
    }
    where = {"cache_dir": data_cfg["cache_dir"], "key_parts": key, "paths": [r.path for r in records],
             "enc_cfg": enc_cfg, "max_pixels": data_cfg.get("max_image_pixels", MAX_PIXELS), "root": root}
    return records, encoder, where


def dataset_store(data_cfg: dict, enc_cfg: dict) -> FeatureStore:
    """The dataset's feature store, opened (or created empty) without extracting anything:
    for tools that fill or inspect it (scripts/measure_store.py)."""
    return open_store(**_dataset(data_cfg, enc_cfg)[2])


def load_records_and_features(data_cfg: dict, enc_cfg: dict):
    """Records, raw features (from the store, extracting what is missing) and per record ""
    or why it is unusable; run once per machine (Lightning's prepare_data)."""
    records, encoder, where = _dataset(data_cfg, enc_cfg)
    feats, reasons = stored_features(encoder_factory=lambda: encoder, **where)
    reasons = [why or ("" if r.captions else "no caption with a word left after tokenisation")
               for r, why in zip(records, reasons)]
    return records, feats, reasons


def _check_files_exist(records: list[ImageRecord], root: Path) -> None:
    """Before any extraction: a dataset none of whose image files exists is a wrong path,
    said in one sentence now rather than as thousands of skipped files later."""
    missing = [r.path for r in records if not r.path.is_file()]
    if records and len(missing) == len(records):
        raise FileNotFoundError(
            f"none of the {len(records)} image files of the dataset exists (e.g. {missing[0]}); "
            f"images are read from {root}/<filepath>/<filename>: set data.image_root to the folder "
            "that holds them (see data/README.md)")
    if missing:
        log.warning("%d of %d image files are missing (e.g. %s); they will be skipped and listed",
                    len(missing), len(records), missing[0])


def load_features(data_cfg: dict, enc_cfg: dict) -> PreparedData:
    """Records and raw features; unusable images are left out and reported by name."""
    records, feats, reasons = load_records_and_features(data_cfg, enc_cfg)
    skipped = [(str(r.path), why) for r, why in zip(records, reasons) if why]
    empty = sum(r.empty_captions for r in records)
    if skipped:
        shown = "; ".join(f"{p}: {why}" for p, why in skipped[:20])
        more = (f" (and {len(skipped) - 20} more, all listed in the run's skipped_images.txt)"
                if len(skipped) > 20 else "")
        log.warning("skipped %d image(s), excluded from every split: %s%s", len(skipped), shown, more)
    if empty:
        log.warning("dropped %d caption(s) with no word after tokenisation (empty or punctuation only)", empty)
    keep = np.flatnonzero([not why for why in reasons])
    return PreparedData([records[i] for i in keep], feats, keep, skipped, empty_captions=empty)


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
