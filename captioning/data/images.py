"""Reading image files the way real folders need it.

Every mode PIL opens becomes 8-bit RGB (alpha composited on white, 16-bit scaled to 8 bits,
CMYK and palettes converted), the EXIF orientation is applied (phones store portraits sideways
with a rotation tag), a pixel limit stops decompression bombs before they are decoded, and
paths are confined to the dataset's image root. A file that cannot be used gives a reason,
never an exception, so a broken file is skipped, counted and named, and never ends a run.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps
from torch.utils.data import Dataset

from ..schema.data import MAX_IMAGE_PIXELS

MAX_PIXELS = MAX_IMAGE_PIXELS  # data.max_image_pixels' default (its schema is its home)


def outside_root(path: Path, root: Path | None) -> str | None:
    """Why `path` is refused (it leaves `root` once `..` and symlinks are resolved, e.g. an
    absolute path or a link to a system file), or None when it is inside or there is no root."""
    if root is None:
        return None
    resolved, base = Path(path).resolve(), Path(root).resolve()
    if not resolved.is_relative_to(base):
        return f"outside the image root {base} (resolves to {resolved}); refused"
    return None


def _to_rgb(im: Image.Image) -> Image.Image:
    """Any PIL mode -> RGB. Transparency is composited on white (dropping the alpha channel
    would show whatever colour the transparent pixels happen to store, often black)."""
    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):  # 16/32-bit grey: scale, do not clip
        arr = np.asarray(im, dtype=np.float64)
        top = 65535.0 if im.mode.startswith("I") else max(float(arr.max()), 1.0)
        im = Image.fromarray(np.clip(arr * (255.0 / top), 0, 255).round().astype(np.uint8), "L")
    if im.mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return im.convert("RGB")


def open_rgb(path: str | Path, max_pixels: int = MAX_PIXELS,
             root: Path | None = None) -> tuple[Image.Image | None, str | None]:
    """-> (the file as an RGB image, upright by its EXIF orientation, None), or (None, why the
    file cannot be used): training's rules for every file it reads."""
    refused = outside_root(Path(path), root)
    if refused:
        return None, refused
    previous = Image.MAX_IMAGE_PIXELS
    try:
        Image.MAX_IMAGE_PIXELS = max_pixels  # PIL checks it when it reads the header
        with warnings.catch_warnings():
            # PIL only warns between the limit and twice the limit: refuse both alike.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                return upright_rgb(im), None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        return None, f"too large ({err}); raise data.max_image_pixels to accept it"
    except FileNotFoundError:
        return None, "missing file"
    except Exception as err:  # noqa: BLE001  (any decoder failure is a skip, never a crash)
        if Path(path).is_file() and Path(path).stat().st_size == 0:
            return None, "empty file (0 bytes)"
        return None, f"not a readable image ({type(err).__name__}: {str(err)[:200]})"
    finally:
        Image.MAX_IMAGE_PIXELS = previous


def upright_rgb(im: Image.Image) -> Image.Image:
    """A PIL image as the encoder reads it: rotated by its EXIF orientation, in RGB (loaded)."""
    rgb = _to_rgb(ImageOps.exif_transpose(im))
    rgb.load()
    return rgb


def encoder_pixels(rgb: Image.Image, size: int) -> np.ndarray:
    """An RGB image -> (size, size, 3) uint8, resized whole (no crop) as the encoder sees it."""
    return np.asarray(rgb.resize((size, size), Image.BILINEAR), dtype=np.uint8).copy()


def read_image(path: str | Path, size: int, max_pixels: int = MAX_PIXELS,
               root: Path | None = None) -> tuple[np.ndarray | None, str | None]:
    """-> ((size, size, 3) uint8, None), or (None, why the file cannot be used)."""
    rgb, why = open_rgb(path, max_pixels, root)
    return (None, why) if rgb is None else (encoder_pixels(rgb, size), None)


class ImageFiles(Dataset):
    """Images resized to size x size: item = ((3, size, size) uint8, reason); reason is "" for
    a good image, else why it was skipped (the tensor is then zeros)."""

    def __init__(self, paths: list[Path], size: int, max_pixels: int = MAX_PIXELS,
                 root: Path | None = None) -> None:
        self.paths, self.size, self.max_pixels, self.root = paths, size, max_pixels, root

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, str]:
        pixels, why = read_image(self.paths[i], self.size, self.max_pixels, self.root)
        if pixels is None:
            return torch.zeros(3, self.size, self.size, dtype=torch.uint8), why
        return torch.from_numpy(pixels).permute(2, 0, 1), ""
