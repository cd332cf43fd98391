"""Caption image files with a checkpoint (scripts/caption.py): inference.ImageCaptioner over a file
or a folder, with figures; feature files for a model trained on precomputed features."""

from __future__ import annotations

from pathlib import Path

import torch

from .data.precomputed import read_feature_file
from .errors import UserError
from .inference import ImageCaptioner
from .predict import Predictor


def _caption_feature_files(captioner: ImageCaptioner, paths: list[Path],
                           attention_map: str | None) -> tuple[list[dict], list[tuple[str, str]]]:
    """A checkpoint trained on precomputed features captions feature files: <id>.npy (N, C)
    or <id>.npz (its features_key, boxes_key), as its training folder held them."""
    if attention_map:
        raise UserError("attention_map: a model trained on precomputed features has no image "
                        "grid to draw its attention on; leave attention_map unset")
    skipped, ready = [], []
    for path in paths:
        try:
            ready.append((path, read_feature_file(path, captioner.predictor.cfg["encoder"])))
        except ValueError as err:
            skipped.append((str(path), str(err)))
    captions = captioner([pair for _, pair in ready])
    return [{"image": str(path), "caption": c.caption, "figure": None,
             **({"nbest": c.nbest} if c.nbest else {})} for (path, _), c in zip(ready, captions)], skipped


def _figure_path(attention_map: str | None, image: Path, many: bool) -> Path | None:
    if not attention_map:
        return None
    out = Path(attention_map)
    return out.with_name(f"{out.stem}_{image.stem}.png") if many else out


@torch.no_grad()
def caption_images(
    checkpoint: str | Path, image: str | Path, decode: dict | None = None,
    attention_map: str | None = None, batch_size: int = 16, scale: str = "shared",
    device: str = "auto",
) -> tuple[list[dict], list[tuple[str, str]]]:
    """-> ([{image, caption, figure}], [(path, why skipped)]). A directory is captioned file by
    file (sorted); unreadable files are skipped and reported, never fatal. Encoder and decoder
    run on `device` (auto: the GPU when there is one)."""
    predictor = Predictor.load(checkpoint, decode, device)
    cfg = predictor.cfg
    if not str(image).strip():
        raise ValueError("image= is empty: give an image file or a directory of images")
    image = Path(image)
    if not image.exists():
        raise FileNotFoundError(f"image path not found: {image}")
    many = image.is_dir()
    paths = sorted(p for p in image.iterdir() if p.is_file()) if many else [image]
    captioner = ImageCaptioner(predictor, batch_size)
    if cfg["encoder"]["name"] == "precomputed":
        return _caption_feature_files(captioner, paths, attention_map)
    results, skipped = [], []
    for start in range(0, len(paths), batch_size):  # a folder is read a batch at a time
        chunk = paths[start : start + batch_size]
        for path, caption in zip(chunk, captioner(chunk)):
            if caption.error:
                skipped.append((str(path), caption.error))
                continue
            fig = _figure_path(attention_map, path, many)
            if fig is not None:
                caption.figure(fig, scale=scale)
            results.append({"image": str(path), "caption": caption.caption,
                            "figure": str(fig) if fig else None,
                            **({"nbest": caption.nbest} if caption.nbest else {})})
    return results, skipped
