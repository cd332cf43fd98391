"""Caption image files with a checkpoint (scripts/caption.py): inference.ImageCaptioner over a file
or a folder, with figures; feature files for a model trained on precomputed features."""

from __future__ import annotations

from pathlib import Path

import torch

from .data.precomputed import read_feature_file
from .errors import UserError
from .inference import ImageCaptioner
from .predict import Predictor


def _caption_feature_files(predictor: Predictor, paths: list[Path], batch_size: int,
                           attention_map: str | None) -> tuple[list[dict], list[tuple[str, str]]]:
    """A checkpoint trained on precomputed features captions feature files: <id>.npy (N, C)
    or <id>.npz (its features_key, boxes_key), as its training folder held them."""
    enc = predictor.cfg["encoder"]
    if attention_map:
        raise UserError("attention_map: a model trained on precomputed features has no image "
                        "grid to draw its attention on; leave attention_map unset")
    results, skipped, ready = [], [], []
    for path in paths:
        try:
            feats, boxes = read_feature_file(path, enc)
        except ValueError as err:
            skipped.append((str(path), str(err)))
            continue
        ready.append((path, feats, boxes))
    for start in range(0, len(ready), batch_size):
        chunk = ready[start : start + batch_size]
        n, where = max(len(f) for _, f, _ in chunk), predictor.device
        raw = torch.zeros(len(chunk), n, enc["dim"], dtype=torch.float16, device=where)  # (B, N, C)
        counts = torch.tensor([len(f) for _, f, _ in chunk], device=where)
        regions = {"mask": torch.arange(n, device=where) < counts[:, None]}  # (B, N)
        boxed = all(b is not None for *_, b in chunk)
        boxes = torch.zeros(len(chunk), n, 4, device=where) if boxed else None
        for k, (_, feats, box) in enumerate(chunk):
            raw[k, : len(feats)] = torch.from_numpy(feats).to(where)
            if boxes is not None:
                boxes[k, : len(box)] = torch.from_numpy(box).to(where)
        if boxes is not None:
            regions["boxes"] = boxes
        for (path, _, _), caption in zip(chunk, predictor(raw, regions)):
            results.append({"image": str(path), "caption": " ".join(caption.words), "figure": None,
                            **({"nbest": caption.nbest} if caption.nbest else {})})
    return results, skipped


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
    if cfg["encoder"]["name"] == "precomputed":
        return _caption_feature_files(predictor, paths, batch_size, attention_map)
    captioner = ImageCaptioner(predictor, batch_size)
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
