"""Everything between a dataset on disk and tensors a model can train on, without Lightning:
find/generate the dataset, cache encoder features, build the vocabulary, fit the normaliser.

Features stay as the encoder wrote them (raw, float16, memory-mapped from the cache): the
model normalises each batch itself, so no normalised or filtered copy of the dataset is made.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from ..models.encoder import ResNetEncoder, build_encoder
from ..models.encoder_specs import global_first
from ..models.normalizer import FeatureNormalizer, fit_normalizer
from ..schema.fields import unset
from .checks import check_files, check_splits
from .features import open_store, store_lock_name, stored_features
from .formats import load_records
from .precomputed import precomputed_features
from .records import ImageRecord, image_root_of
from .store import FeatureStore, LazyFeatures
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
    empty_captions: int = 0  # captions dropped because no word was left
    vocab: Vocabulary | None = None  # built from the training captions (training only)
    normalizer: FeatureNormalizer | None = None  # fitted on training features (training only)

    def split_indices(self, split: str) -> list[int]:
        return [i for i, r in enumerate(self.records) if r.split == split]

    def raw_features(self, indices) -> torch.Tensor:
        """Raw features of records `indices`: (B, N, C) in the stored dtype (the model's
        normaliser casts; half the bytes to copy to a GPU)."""
        return torch.from_numpy(np.ascontiguousarray(self.features[self.rows[np.asarray(indices)]]))

    def batch_features(self, indices) -> dict[str, torch.Tensor]:
        """{"features": (B, N, C)} as raw_features; for region features (encoder=precomputed)
        cut to the batch's most regions, with "mask" (B, N) (True = a real region) and, where
        the store has them, "boxes" (B, N, 4)."""
        counts = getattr(self.features, "counts", None)
        if counts is None or self.features.grid:
            return {"features": self.raw_features(indices)}
        rows = self.rows[np.asarray(indices)]
        n = max(int(counts[rows].max()), 1)
        out = {"features": torch.from_numpy(np.ascontiguousarray(self.features[rows, :n])),  # (B, n, C)
               "mask": torch.arange(n) < torch.from_numpy(counts[rows].astype(np.int64))[:, None]}  # (B, n)
        if self.features.boxes is not None:
            out["boxes"] = torch.from_numpy(np.ascontiguousarray(self.features.boxes[rows, :n]))  # (B, n, 4)
        return out


def resolve_json(data_cfg: dict) -> tuple[Path, Path | None]:
    """The dataset JSON (generating the built-in dataset on first use) and the image root."""
    if "synthetic" in data_cfg:
        return generate(data_cfg["root"], SyntheticConfig(**data_cfg["synthetic"])), None
    if unset(data_cfg["json_path"]):
        raise UserError(f"data.json_path is not set for data={data_cfg['name']}: "
                        "data.json_path=<dataset JSON> data.image_root=<its images>")
    root = data_cfg["image_root"]
    return Path(data_cfg["json_path"]), None if unset(root) else Path(root)


def dataset_format(data_cfg: dict) -> str:
    """`data.format`; the built-in data is generated as a Karpathy-format JSON (data/synthetic.py)."""
    return "karpathy" if "synthetic" in data_cfg else data_cfg["format"]


def load_dataset_records(data_cfg: dict) -> tuple[list[ImageRecord], Path, Path]:
    """The dataset's records in its `data.format`, its file and its image root."""
    path, image_root = resolve_json(data_cfg)
    records = load_records(path, image_root, dataset_format(data_cfg),
                           data_cfg.get("split_file"), data_cfg.get("split"))
    return records, path, image_root_of(path, image_root)


@dataclass
class Located:
    """A dataset found and checked (fast checks only), its store not yet read."""

    records: list[ImageRecord]
    encoder: ResNetEncoder | None  # built, not run; its weights id keys the store (None: precomputed)
    store_args: dict  # open_store's arguments
    file_problems: dict[str, list[str]]  # captioning.data.checks.file_problems

    def lock_name(self) -> str:
        """The `preparing` lock its features are built under: the store's own
        (features.store_lock_name); precomputed features are copied under the dataset's."""
        if self.encoder is None:
            return "prepare"
        args = self.store_args
        return store_lock_name(args["key_parts"], args["paths"], args["enc_cfg"], args["max_pixels"],
                               args["root"])


def first_images(records: list[ImageRecord], first: dict[str, int] | None) -> list[ImageRecord]:
    """Each split cut to its first `first[split]` images in file order (splits not named: whole):
    a run whose batches are limited reads, and extracts, only the images they can reach."""
    if not first:
        return records
    seen: dict[str, int] = {}
    out = []
    for r in records:
        seen[r.split] = seen.get(r.split, 0) + 1
        if r.split not in first or seen[r.split] <= first[r.split]:
            out.append(r)
    return out


def locate_dataset(data_cfg: dict, enc_cfg: dict, training: bool = False,
                   first: dict[str, int] | None = None) -> Located:
    """Read the dataset file and run the checks that need no decoding (a dataset none of whose
    images exists fails here, before any extraction; for `training`, one whose val or test
    split shares images with train too). `first`: each split's first images only (first_images)."""
    records, json_path, root = load_dataset_records(data_cfg)
    if training:  # on the whole dataset: a cut must not hide a split's overlap with train
        check_splits(records, data_cfg.get("split_file") or str(json_path))
    records = first_images(records, first)
    if enc_cfg["name"] == "precomputed":  # features come from files: the images need not exist
        return Located(records, None, {"enc_cfg": enc_cfg, "cache_dir": data_cfg["cache_dir"]}, {})
    problems = check_files(records, root)
    encoder = build_encoder(enc_cfg)
    # The store's key: the images (relative to `root`, with their sizes), encoder and weights,
    # size and precision (features.open_store); `legacy`: the key stores were made under before
    # (the dataset file's absolute path and mtime), adopted without re-extraction.
    key = {"encoder": enc_cfg["name"], "weights": encoder.weights_id}
    if global_first(enc_cfg):  # rows hold the global vector too (absent from other stores' keys)
        key["global_first"] = True
    legacy = {"dataset": str(json_path.resolve()), "dataset_mtime": json_path.stat().st_mtime_ns,
              "format": dataset_format(data_cfg)}
    args = {"cache_dir": data_cfg["cache_dir"], "key_parts": key, "paths": [r.path for r in records],
            "enc_cfg": enc_cfg, "max_pixels": data_cfg["max_image_pixels"], "root": root,
            "legacy": legacy}
    return Located(records, encoder, args, problems)


def dataset_store(data_cfg: dict, enc_cfg: dict) -> FeatureStore:
    """The dataset's feature store, opened (or created empty) without extracting anything:
    for tools that fill or inspect it."""
    if enc_cfg["name"] == "precomputed":
        raise UserError("encoder=precomputed: its store is filled from encoder.path by training "
                        "(nothing to extract)")
    return open_store(**locate_dataset(data_cfg, enc_cfg).store_args)


def read_features(located: Located) -> tuple[LazyFeatures, list[str]]:
    """Raw features from the store (extracting what is missing) and per record "" or why it is
    unusable."""
    if located.encoder is None:
        feats, reasons = precomputed_features(located.records, **located.store_args)
    else:
        feats, reasons = stored_features(encoder_factory=lambda: located.encoder, **located.store_args)
    return feats, [why or ("" if r.captions else "no caption with a word left after tokenisation")
                   for r, why in zip(located.records, reasons)]


@contextmanager
def preparing(cache_dir: str | Path, name: str = "prepare"):
    """One process at a time prepares what lock `name` guards under this cache dir: "prepare",
    the dataset (the built-in one is generated); a store's own name (features.store_lock_name),
    that store's extraction. DDP ranks, torchrun workers, parallel sweep jobs sharing a cache:
    the others wait here, then find it built; stores of other encoders or image sizes build at
    the same time. An advisory lock on <cache_dir>/.<name>.lock (POSIX; on a shared filesystem
    it needs working flock)."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): one process per cache is the user's job
        yield
        return
    path = Path(cache_dir) / f".{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            what = "data" if name == "prepare" else f"these features (lock .{name}.lock)"
            log.info("data: another process is preparing %s under %s; waiting for it", what, cache_dir)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def dataset_features(data_cfg: dict, enc_cfg: dict, training: bool = False,
                     first: dict[str, int] | None = None) -> tuple[Located, LazyFeatures, list[str]]:
    """The dataset located (its records, encoder and store: locate_dataset) and its raw features read
    (read_features), each by one process at a time (`preparing`): with a cold cache the first
    builds, the rest wait and load. Every builder of a store comes through here (training,
    scripts/prepare_data.py), so two never write one store. The dataset and its store are locked
    apart: a run of another encoder or image size on the same dataset extracts its own store while
    this one extracts (a grid's cells in parallel). `first`: each split's first images only."""
    cache_dir = data_cfg.get("cache_dir") or "data/cache"
    with preparing(cache_dir):
        located = locate_dataset(data_cfg, enc_cfg, training, first)
    with preparing(cache_dir, located.lock_name()):
        return (located, *read_features(located))


def usable_data(data_cfg: dict, enc_cfg: dict, training: bool = False,
                first: dict[str, int] | None = None) -> PreparedData:
    """Records and raw features; unusable images are left out and reported by name. `training`:
    refuse splits that share images with train (locate_dataset); `first`: each split's first
    images only (first_images)."""
    located, feats, reasons = dataset_features(data_cfg, enc_cfg, training, first)
    records = located.records
    skipped = [(str(r.path), why) for r, why in zip(records, reasons) if why]
    empty = sum(r.empty_captions for r in records)
    if skipped:
        shown = "; ".join(f"{p}: {why}" for p, why in skipped[:20])
        more = (f" (and {len(skipped) - 20} more, all listed in the run's skipped_images.txt)"
                if len(skipped) > 20 else "")
        log.warning("skipped %d image(s), excluded from every split: %s%s", len(skipped), shown, more)
    if empty:
        log.warning("dropped %d caption(s) with no word after tokenisation (empty or punctuation "
                    "only)", empty)
    keep = np.flatnonzero([not why for why in reasons])
    return PreparedData([records[i] for i in keep], feats, keep, skipped, empty_captions=empty)


def prepare_data(data_cfg: dict, enc_cfg: dict, first: dict[str, int] | None = None) -> PreparedData:
    """usable_data, then the vocabulary from the training captions (all of the split's, also
    where `first` cuts it) and the normaliser fitted on training features (of the images it
    reads: `first`, as usable_data)."""
    data = usable_data(data_cfg, enc_cfg, training=True, first=first)
    train = data.split_indices("train")
    if not train:
        raise UserError("the dataset has no readable training images")
    captions = (c for i in train for c in data.records[i].captions)
    if first and "train" in first:  # the whole split's words: a limited run's checkpoint fits a
        # full run's vocabulary (init_from, evaluation), and captions need no features
        captions = (c for r in load_dataset_records(data_cfg)[0] if r.split == "train" for c in r.captions)
    data.vocab = Vocabulary.build(captions, data_cfg["min_word_freq"])
    data.normalizer = _fit(data, train, data_cfg, enc_cfg)
    return data


def _fit(data: PreparedData, train: list[int], data_cfg: dict, enc_cfg: dict) -> FeatureNormalizer:
    """The normaliser fitted on a seeded random sample of at most FIT_ROWS training grid cells
    (or real regions: padding is no feature), read from the store (never a copy of the
    training split)."""
    cells = data.features.shape[1]
    # A fixed permutation of all (training image, cell) positions; its first FIT_ROWS are read.
    pick = torch.randperm(len(train) * cells, generator=torch.Generator().manual_seed(0)).numpy()
    counts = getattr(data.features, "counts", None)
    rows, cell, have = [], [], 0
    for start in range(0, len(pick), FIT_ROWS):  # in slices: bounded memory whatever the size
        part = pick[start : start + FIT_ROWS]
        r, c = data.rows[np.asarray(train)[part // cells]], part % cells
        if counts is not None:  # regions: padding is no feature
            r, c = r[c < counts[r]], c[c < counts[r]]
        rows.append(r[: FIT_ROWS - have])
        cell.append(c[: FIT_ROWS - have])
        if (have := have + len(rows[-1])) == FIT_ROWS:
            break
    rows, cell = np.concatenate(rows), np.concatenate(cell)
    sample = torch.from_numpy(np.asarray(data.features[rows, cell]))  # (<= FIT_ROWS, C)
    mean, transform = fit_normalizer(
        sample, enc_cfg["normalize"], enc_cfg["pca_dim"], enc_cfg["whiten_eps"])
    blind = data_cfg["blind"]
    return FeatureNormalizer(transform.shape[0], transform.shape[1], blind).set(mean, transform)
