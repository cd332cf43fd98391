"""Frozen-encoder features, extracted once into a feature store (captioning.data.store) keyed
by everything that determines them; an interrupted extraction resumes where it stopped."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset
from tqdm import tqdm

from ..models.encoder import ResNetEncoder, autocast_dtype, encoder_dim
from ..provenance import fingerprint
from .images import MAX_PIXELS, ImageFiles
from .store import FeatureStore, LazyFeatures

log = logging.getLogger(__name__)


def extraction_dtype(device: torch.device) -> torch.dtype:
    """bf16 autocast on GPUs and AMX CPUs (faster there), fp32 elsewhere."""
    return autocast_dtype(device)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """`encoder.device`: auto = the GPU when there is one."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@torch.inference_mode()
def extract_features(
    encoder: ResNetEncoder,
    files: ImageFiles | Subset,
    batch_size: int = 64,
    num_workers: int = 1,
    device: str | torch.device = "cpu",
) -> Iterator[tuple[np.ndarray, list[str]]]:
    """Yield per batch the encoder features (B, N, C) as float16 and per image "" or why it
    was skipped; nothing but the current batch is held."""
    device = torch.device(device)
    encoder = encoder.eval().to(device).to(memory_format=torch.channels_last)
    dtype = extraction_dtype(device)
    for images, why in DataLoader(files, batch_size=batch_size, num_workers=num_workers):
        images = images.to(device).float().div_(255)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            yield encoder(images).to(torch.float16).cpu().numpy(), list(why)


def open_store(cache_dir: str | Path, key_parts: dict, paths: list[Path], enc_cfg: dict,
               max_pixels: int = MAX_PIXELS, root: Path | None = None) -> FeatureStore:
    """The dataset's store (created empty, or as far as an earlier run got), keyed by
    everything that determines its rows."""
    device = resolve_device(enc_cfg.get("device", "auto"))
    spec = {**key_parts, "paths": fingerprint([str(p) for p in paths]), "size": enc_cfg["image_size"],
            "max_pixels": max_pixels, "root": str(root) if root else None,
            "precision": str(extraction_dtype(device)).removeprefix("torch."),
            # the batch fixes the float summation order: part of what the rows are
            "batch_size": enc_cfg.get("batch_size", 64)}
    cells = math.ceil(enc_cfg["image_size"] / 32) ** 2  # every ResNet stage rounds up when halving
    return FeatureStore.open_or_create(Path(cache_dir) / f"store_{fingerprint(spec, length=16)}",
                                       spec, len(paths), cells, encoder_dim(enc_cfg["name"]))


def stored_features(
    cache_dir: str | Path,
    key_parts: dict,
    paths: list[Path],
    encoder_factory,
    enc_cfg: dict,
    max_pixels: int = MAX_PIXELS,
    root: Path | None = None,
) -> tuple[LazyFeatures, list[str]]:
    """The dataset's features from its store (extracting the rows that are not done yet).
    -> (lazily memory-mapped (rows, N, C) float16 features, per row "" or why it was skipped)."""
    store = open_store(cache_dir, key_parts, paths, enc_cfg, max_pixels, root)
    if not store.complete:
        _extract_into(store, encoder_factory(), paths, enc_cfg, max_pixels, root)
    else:
        log.info("features: loaded from store %s", store.root)
    return store.features(), store.reasons()


def _extract_into(store: FeatureStore, encoder: ResNetEncoder, paths: list[Path], enc_cfg: dict,
                  max_pixels: int, root: Path | None) -> None:
    device = resolve_device(enc_cfg.get("device", "auto"))  # as open_store keyed the precision
    start, total = store.rows_done, len(paths)
    if start:
        log.info("features: resuming %s: %d of %d rows already done", store.root, start, total)
    else:
        log.info("features: extracting %d images on %s -> %s", total, device, store.root)
    files = ImageFiles(paths, enc_cfg["image_size"], max_pixels, root)
    batches = extract_features(encoder, Subset(files, range(start, total)),
                               enc_cfg.get("batch_size", 64), enc_cfg.get("num_workers", 1), device)
    # A progress bar with rate and ETA, like Lightning's; plus one log line at the end.
    began = time.perf_counter()
    with tqdm(total=total, initial=start, unit="img", desc="features", dynamic_ncols=True) as bar:
        row = start
        for feats, reasons in batches:
            store.write(row, feats, reasons)
            row += len(feats)
            bar.update(len(feats))
    log.info("features: %d rows in %.0f s (%.1f images/s)", total - start, time.perf_counter() - began,
             (total - start) / max(time.perf_counter() - began, 1e-9))
