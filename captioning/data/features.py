"""Frozen-encoder features, computed once and cached on disk keyed by what determines them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset

from ..models.encoder import ResNetEncoder, best_cpu_dtype
from ..provenance import fingerprint

log = logging.getLogger(__name__)


class ImageFiles(Dataset):
    """Images resized to size x size in [0, 1]; unreadable files yield ok=False, never a crash."""

    def __init__(self, paths: list[Path], size: int) -> None:
        self.paths, self.size = paths, size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        try:
            with Image.open(self.paths[i]) as im:
                im = im.convert("RGB").resize((self.size, self.size), Image.BILINEAR)
                x = torch.from_numpy(np.asarray(im, dtype=np.uint8).copy())
            return x.permute(2, 0, 1), True
        except (OSError, UnidentifiedImageError, ValueError):
            return torch.zeros(3, self.size, self.size, dtype=torch.uint8), False


@torch.inference_mode()
def extract_features(
    encoder: ResNetEncoder,
    paths: list[Path],
    size: int,
    batch_size: int = 64,
    num_workers: int = 1,
    device: str | torch.device = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """Encoder features (M, N, C) as float16 and a validity mask (M,) for unreadable images."""
    device = torch.device(device)
    encoder = encoder.eval().to(device).to(memory_format=torch.channels_last)
    dtype = best_cpu_dtype() if device.type == "cpu" else torch.bfloat16
    loader = DataLoader(ImageFiles(paths, size), batch_size=batch_size, num_workers=num_workers)
    feats, valid = [], []
    for images, ok in loader:
        images = images.to(device).float().div_(255)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            feats.append(encoder(images).to(torch.float16).cpu().numpy())
        valid.append(ok.numpy())
    return np.concatenate(feats), np.concatenate(valid)


def cached_features(
    cache_dir: str | Path,
    key_parts: dict,
    paths: list[Path],
    encoder_factory,
    size: int,
    batch_size: int = 64,
    num_workers: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Load features from cache_dir/features_<key>.npy or compute and store them."""
    cache_dir = Path(cache_dir)
    key = fingerprint({**key_parts, "paths": [str(p) for p in paths], "size": size}, length=16)
    fpath, vpath = cache_dir / f"features_{key}.npy", cache_dir / f"valid_{key}.npy"
    if fpath.exists() and vpath.exists():
        log.info("features: loaded from cache %s", fpath)
        return np.load(fpath, mmap_mode="r"), np.load(vpath)
    cache_dir.mkdir(parents=True, exist_ok=True)
    log.info("features: extracting %d images -> %s", len(paths), fpath)
    feats, valid = extract_features(encoder_factory(), paths, size, batch_size, num_workers)
    # Write to temporary names first so an interrupted run never leaves a truncated cache.
    for path, arr in ((fpath, feats), (vpath, valid)):
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, arr)
        tmp.replace(path)
    (cache_dir / f"features_{key}.json").write_text(json.dumps(key_parts, indent=1, default=str))
    return feats, valid
