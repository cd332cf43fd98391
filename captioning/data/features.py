"""Frozen-encoder features, extracted once into a feature store (captioning.data.store) keyed
by everything that determines them; an interrupted extraction resumes where it stopped."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset
from tqdm import tqdm

from ..device import resolve_device
from ..models import precision_choice as calibrated
from ..models.encoder import ResNetEncoder, autocast_dtype
from ..models.encoder_specs import encoder_dim, feature_rows
from ..provenance import cpu_kind, fingerprint
from .images import MAX_PIXELS, ImageFiles
from .store import FeatureStore, LazyFeatures, adopt_store, is_complete

log = logging.getLogger(__name__)


def extraction_dtype(device: torch.device, precision: str = "auto") -> torch.dtype:
    """`encoder.precision` on `device`: forced, or auto (bf16 on GPUs and AMX CPUs, else fp32)."""
    return autocast_dtype(device, precision)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@torch.inference_mode()
def extract_features(
    encoder: ResNetEncoder,
    files: ImageFiles | Subset,
    batch_size: int = 64,
    num_workers: int = 1,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> Iterator[tuple[np.ndarray, list[str]]]:
    """Yield per batch the encoder features (B, N, C) as float16 and per image "" or why it
    was skipped; nothing but the current batch is held. `dtype`: the autocast precision
    (None: the device's auto rule)."""
    device = torch.device(device)
    encoder = encoder.eval().to(device).to(memory_format=torch.channels_last)
    dtype = dtype or extraction_dtype(device)
    for images, why in DataLoader(files, batch_size=batch_size, num_workers=num_workers):
        images = images.to(device).float().div_(255)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            yield encoder(images).to(torch.float16).cpu().numpy(), list(why)


def _image_name(path: Path, root: Path | None) -> str:
    """A file's path relative to the image root, with / on every OS (so the folder can move)."""
    return (os.path.relpath(path, root) if root else str(path)).replace(os.sep, "/")


def image_fingerprint(paths: list[Path], root: Path | None) -> str:
    """The images a store holds, in order: each file's name (_image_name) and its size in
    bytes (a replaced file is noticed; None: missing now)."""
    items = []
    for path in paths:
        try:
            size = os.stat(path).st_size
        except OSError:
            size = None
        items.append([_image_name(path, root), size])
    return fingerprint(items)


def store_lock_name(key_parts: dict, paths: list[Path], enc_cfg: dict, max_pixels: int = MAX_PIXELS,
                    root: Path | None = None) -> str:
    """The lock of the stores `open_store` would open for these arguments (both precisions):
    the parts of their key that need no file read (the images' names relative to the root,
    not their sizes). Processes that would build the same store take the same lock; a
    store of another encoder, weights, image size or image set builds at the same time."""
    key = {**key_parts, "names": fingerprint([_image_name(p, root) for p in paths]),
           "size": enc_cfg["image_size"], "max_pixels": max_pixels}
    return f"features_{fingerprint(key, length=16)}"


def open_store(cache_dir: str | Path, key_parts: dict, paths: list[Path], enc_cfg: dict,
               max_pixels: int = MAX_PIXELS, root: Path | None = None,
               legacy: dict | None = None) -> FeatureStore:
    """The dataset's store (created empty, or as far as an earlier run got), keyed by what
    determines its rows: the images (image_fingerprint), `key_parts` (encoder, weights), the
    image size, the pixel limit and the extraction precision. Not by the captions, the splits or
    where the folder is. With `encoder.precision=auto`, a complete store of the other precision
    (made on a GPU, say) is reused with a note; a forced precision extracts its own.
    `legacy`: the parts of the old key (dataset file, its mtime, format) whose stores are
    adopted (renamed under the new key), never rebuilt."""
    asked = enc_cfg["precision"]
    want = dtype_name(extraction_dtype(resolve_device(enc_cfg["device"]), asked))
    base = {**key_parts, "images": image_fingerprint(paths, root), "size": enc_cfg["image_size"],
            "max_pixels": max_pixels}
    specs = {p: {**base, "precision": p} for p in ("float32", "bfloat16")}
    dirs = {p: Path(cache_dir) / f"store_{fingerprint(spec, length=16)}" for p, spec in specs.items()}
    if legacy is not None:
        for p in specs:
            old = {**legacy, **key_parts, "paths": fingerprint([str(x) for x in paths]),
                   "size": enc_cfg["image_size"], "max_pixels": max_pixels,
                   "root": str(root) if root else None, "precision": p,
                   "batch_size": enc_cfg["batch_size"]}
            adopt_store(Path(cache_dir) / f"store_{fingerprint(old, length=16)}", dirs[p], old, specs[p])
    other = "float32" if want == "bfloat16" else "bfloat16"
    if asked == "auto" and not is_complete(dirs[want]) and is_complete(dirs[other]):
        log.info("features: reusing %s, extracted in %s (this machine would extract in %s; "
                 "encoder.precision=%s extracts its own)", dirs[other], other, want,
                 "bf16" if want == "bfloat16" else "fp32")
        want = other
    cells = feature_rows(enc_cfg["image_size"], enc_cfg["name"])  # ViT: its class token too
    # How it was built, recorded but not keyed: the batch changes float sums in the last bits only.
    built = {"batch_size": enc_cfg["batch_size"], "machine": cpu_kind(),
             "torch": torch.__version__}
    return FeatureStore.open_or_create(dirs[want], specs[want], len(paths), cells,
                                       encoder_dim(enc_cfg["name"]), built=built)


def stored_features(
    cache_dir: str | Path,
    key_parts: dict,
    paths: list[Path],
    encoder_factory,
    enc_cfg: dict,
    max_pixels: int = MAX_PIXELS,
    root: Path | None = None,
    legacy: dict | None = None,
) -> tuple[LazyFeatures, list[str]]:
    """The dataset's features from its store (extracting the rows that are not done yet).
    -> (lazily memory-mapped (rows, N, C) float16 features, per row "" or why it was skipped)."""
    store = open_store(cache_dir, key_parts, paths, enc_cfg, max_pixels, root, legacy)
    if not store.complete:
        _extract_into(store, encoder_factory(), paths, enc_cfg, max_pixels, root)
    else:
        log.info("features: loaded from store %s", store.root)
    return store.features(), store.reasons()


def _note_forced_precision(dtype: torch.dtype) -> None:
    """A forced encoder.precision that this CPU's calibration measured slower (bf16 where its
    convolutions have no bf16 kernels: 4-7x fp32's time on AVX2): say so and by how much,
    before a long extraction, so a slow store is not taken for a hang."""
    entry = calibrated.calibration()["encoder"]
    times = {torch.float32: entry["fp32_s"], torch.bfloat16: entry["bf16_s"]}
    faster = torch.bfloat16 if entry["choice"] == "bf16" else torch.float32
    if faster == dtype or not times[dtype] or not times[faster]:
        return
    log.warning("features: encoder.precision=%s is forced, and this CPU ran the encoder's "
                "convolutions %.1fx slower in it than in %s (%.1f against %.1f ms, %s): the "
                "extraction takes about that much longer than with encoder.precision=auto",
                "bf16" if dtype == torch.bfloat16 else "fp32", times[dtype] / times[faster],
                dtype_name(faster), times[dtype] * 1e3, times[faster] * 1e3, calibrated.cache_path())


def _extract_into(store: FeatureStore, encoder: ResNetEncoder, paths: list[Path], enc_cfg: dict,
                  max_pixels: int, root: Path | None) -> None:
    device = resolve_device(enc_cfg["device"])
    dtype = getattr(torch, store.manifest["spec"]["precision"])  # the precision the store is keyed by
    start, total = store.rows_done, len(paths)
    if start:
        log.info("features: resuming %s: %d of %d rows already done", store.root, start, total)
    else:
        log.info("features: extracting %d images on %s in %s -> %s", total, device, dtype_name(dtype),
                 store.root)
    if device.type == "cpu" and enc_cfg["precision"] != "auto":
        _note_forced_precision(dtype)
    files = ImageFiles(paths, enc_cfg["image_size"], max_pixels, root)
    batches = extract_features(encoder, Subset(files, range(start, total)),
                               enc_cfg["batch_size"], enc_cfg["num_workers"], device, dtype)
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
