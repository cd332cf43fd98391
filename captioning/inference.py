"""Caption images from Python in two calls, with the attention behind every word:

    from captioning import ImageCaptioner
    cap = ImageCaptioner.from_checkpoint("outputs/train/runs/<run>/checkpoints/best.ckpt")
    out = cap(["a.jpg", pil_image, array])    # one ImageCaption per image, in order
    out[0].caption, out[0].maps.shape         # maps: (words, H, W) at the image's own size
    out[0].figure("a_attention.png")          # what scripts/caption.py draws

Images follow training's rules: EXIF orientation, any PIL mode to RGB (transparency on white),
the whole image resized to the encoder's square input (no crop), so each attention key covers
its block of the original image. A file that cannot be read is named in its result's `error`,
never a crash. A model trained on precomputed features takes feature arrays (N, C) instead.
`ImageCaptioner` is the user's object; `models.Captioner` is the network inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from .data.features import extraction_dtype
from .data.images import MAX_PIXELS, encoder_pixels, open_rgb, upright_rgb
from .errors import UserError
from .models.attention import sentinel_weight
from .models.attention.position import grid_side
from .models.encoder import build_encoder
from .predict import Predictor


@dataclass
class ImageCaption:
    """One image's caption and the attention behind each of its words."""

    caption: str
    words: list[str]
    weights: torch.Tensor | None  # (len(words), N): word t's weights over the N keys
    image: np.ndarray | None  # (H, W, 3) uint8: the image as read (upright, RGB)
    nbest: list[dict] | None = None  # decode.n_best > 1: {caption, score, logprob}, best first
    error: str | None = None  # why this image was not captioned (the others were)

    @property
    def sentinel(self) -> list[float]:
        """Per word, the attention's share not on the image (adaptive attention's sentinel;
        0 for modes whose weights sum to 1)."""
        return sentinel_weight(self.weights).tolist()

    @property
    def maps(self) -> np.ndarray:
        """(len(words), H, W) float32: each word's weights over the image, key (i, j) of the
        side x side grid spread over its block of rows and columns (the resize the encoder saw
        was the whole image, so block k of the grid is block k of the image)."""
        h, w = self.image.shape[:2]
        side = grid_side(self.weights.shape[-1], "an attention map")
        grid = self.weights.float().reshape(-1, side, side).numpy()  # (L, side, side)
        rows = np.minimum(np.arange(h) * side // h, side - 1)  # (H,) the grid row of each pixel row
        cols = np.minimum(np.arange(w) * side // w, side - 1)  # (W,)
        return grid[:, rows][:, :, cols].astype(np.float32)

    def figure(self, path: str | Path | None = None, scale: str = "shared") -> Path | np.ndarray:
        """The attention figure of scripts/caption.py: a PNG at `path`, or the RGB array."""
        from .visualize import attention_canvas, attention_figure

        if self.image is None or self.weights is None:
            raise ValueError(f"no figure: {self.error or 'a model on precomputed features has no image'}")
        if path is None:
            return attention_canvas(self.image, self.words, self.weights, scale=scale)
        return attention_figure(self.image, self.words, self.weights, path, scale=scale)


def _as_rgb(image: Any, max_pixels: int) -> tuple[Image.Image | None, str | None]:
    """A path, a PIL image, an (H, W[, 3|4]) uint8 array or a (3, H, W) tensor (uint8, or float
    in [0, 1]) -> (RGB image, None) or (None, why)."""
    if isinstance(image, (str, Path)):
        return open_rgb(image, max_pixels)
    if isinstance(image, Image.Image):
        return upright_rgb(image), None
    if isinstance(image, torch.Tensor):
        t = image.detach().cpu()
        if t.ndim != 3 or t.shape[0] not in (1, 3):
            return None, f"a tensor image must be (3, H, W) or (1, H, W), got {tuple(t.shape)}"
        if t.is_floating_point():
            t = (t.clamp(0, 1) * 255).round()
        image = t.to(torch.uint8).permute(1, 2, 0).squeeze(-1).numpy()
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3):
            return None, f"an array image must be (H, W) or (H, W, 3|4) uint8: {image.shape} {image.dtype}"
        return upright_rgb(Image.fromarray(image)), None
    return None, f"not an image: {type(image).__name__} (a path, a PIL image, an array or a tensor)"


class ImageCaptioner:
    """A checkpoint ready to caption images: `from_checkpoint(path)`, then call it."""

    def __init__(self, predictor: Predictor, batch_size: int | None = None) -> None:
        # default: the run's test-stage batches (data.eval_batch_size), as its captions were made
        self.predictor = predictor
        self.batch_size = batch_size or predictor.cfg["data"]["eval_batch_size"]
        self.max_pixels = predictor.cfg["data"].get("max_image_pixels") or MAX_PIXELS  # the run's limit
        enc = predictor.cfg["encoder"]
        self.precomputed = enc["name"] == "precomputed"
        # the frozen network the run extracted its features with (a tuned one is in the model)
        self.tuned = predictor.model.encoder is not None
        self.encoder, self.dtype = None, torch.float32
        if not (self.precomputed or self.tuned):
            self.encoder = build_encoder(enc).eval().to(predictor.device)
            self.dtype = extraction_dtype(predictor.device, enc["precision"])  # the store's precision

    @classmethod
    def from_checkpoint(cls, checkpoint: str | Path, device: str = "auto", decode: dict | None = None,
                        batch_size: int | None = None) -> ImageCaptioner:
        """`decode`: settings over the checkpoint's own (beam_size, n_best, sample, ...);
        device: auto (the GPU when there is one), cpu, cuda, cuda:N. Read safely
        (weights_only), as every checkpoint here."""
        return cls(Predictor.load(checkpoint, decode, device), batch_size)

    @torch.no_grad()
    def features(self, pixels: torch.Tensor) -> torch.Tensor:
        """(B, 3, S, S) uint8 -> raw features (B, N, C) as training read them: the tuned
        encoder's in float32, else the frozen encoder's at the run's extraction precision,
        stored as float16 like the feature store."""
        pixels = pixels.to(self.predictor.device)
        if self.tuned:
            return self.predictor.model.encode(pixels)
        where = self.predictor.device
        with torch.autocast(where.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            return self.encoder(pixels.float() / 255).to(torch.float16)

    def __call__(self, images: Any) -> list[ImageCaption]:
        """One image or a list of them -> one ImageCaption per image, in order."""
        items = list(images) if isinstance(images, (list, tuple)) else [images]
        if self.precomputed:
            return self._caption_features(items)
        size = self.predictor.cfg["encoder"]["image_size"]
        read = [_as_rgb(x, self.max_pixels) for x in items]
        out: list[ImageCaption | None] = [
            None if rgb is not None else ImageCaption("", [], None, None, error=why) for rgb, why in read]
        todo = [k for k, (rgb, _) in enumerate(read) if rgb is not None]
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            pixels = torch.stack([torch.from_numpy(encoder_pixels(read[k][0], size)).permute(2, 0, 1)
                                  for k in chunk])  # (B, 3, S, S) uint8
            for k, c in zip(chunk, self._decode(self.features(pixels))):
                out[k] = ImageCaption(" ".join(c.words), c.words, c.weights,
                                      np.asarray(read[k][0], dtype=np.uint8), c.nbest)
        return out

    def _caption_features(self, items: list) -> list[ImageCaption]:
        """A model on precomputed features: per image an (N, C) array, or a pair (features
        (N, C), boxes (N, 4) or None) as data/precomputed.read_feature_file gives them."""
        pairs = [x if isinstance(x, tuple) else (x, None) for x in items]
        where, out = self.predictor.device, []
        for start in range(0, len(pairs), self.batch_size):
            chunk = [(torch.as_tensor(np.asarray(f)), b) for f, b in pairs[start : start + self.batch_size]]
            if any(f.ndim != 2 for f, _ in chunk):
                raise UserError("this checkpoint was trained on precomputed features: give each "
                                "image's features as an (N, C) array")
            n = max(len(f) for f, _ in chunk)
            width = chunk[0][0].shape[1]
            raw = torch.zeros(len(chunk), n, width, dtype=torch.float16, device=where)  # (B, N, C)
            counts = torch.tensor([len(f) for f, _ in chunk], device=where)
            regions = {"mask": torch.arange(n, device=where) < counts[:, None]}  # (B, N)
            boxed = all(b is not None for _, b in chunk)
            if boxed:
                regions["boxes"] = torch.zeros(len(chunk), n, 4, device=where)  # (B, N, 4)
            for k, (f, b) in enumerate(chunk):
                raw[k, : len(f)] = f.to(where)
                if boxed:
                    regions["boxes"][k, : len(b)] = torch.as_tensor(b).to(where)
            out += [ImageCaption(" ".join(c.words), c.words, c.weights, None, c.nbest)
                    for c in self._decode(raw, regions)]
        return out

    def _decode(self, raw: torch.Tensor, regions: dict | None = None) -> list:
        try:
            return self.predictor(raw, regions)
        except torch.OutOfMemoryError:
            raise UserError(f"out of memory decoding {len(raw)} images at once on "
                            f"{self.predictor.device}: pass a smaller batch_size") from None
