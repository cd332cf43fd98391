"""The built-in dataset: seeded scenes of coloured shapes with five paraphrased captions each.

Written as real PNG files plus a Karpathy-split JSON (the Flickr8k/COCO format), so the same
loader reads it and real datasets. Every object keeps its ground truth (shape, colour, size,
position name and pixel bounding box) for attribute accuracy and attention grounding.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from ..errors import UserError
from ..provenance import fingerprint

COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 200, 30),
    "purple": (140, 50, 180),
}
SHAPES = ("circle", "square", "triangle")
SIZES = ("small", "large")
ROWS = ("top", "middle", "bottom")
COLS = ("left", "center", "right")
# Canonical names of the 3x3 cells, row-major.
POSITIONS = tuple(
    "center" if (r, c) == ("middle", "center") else f"{r} {c}" for r in ROWS for c in COLS
)

# Paraphrases. The attribute scorer (captioning.metrics.attributes) reads the same lexicon.
SIZE_WORDS = {"small": ("small", "little", "tiny"), "large": ("large", "big")}
POSITION_PHRASES = {
    "top left": ("in the top left corner", "at the top left", "in the upper left"),
    "top center": ("at the top", "at the top center", "in the upper middle"),
    "top right": ("in the top right corner", "at the top right", "in the upper right"),
    "middle left": ("on the left", "at the middle left", "on the left side"),
    "center": ("in the center", "in the middle"),
    "middle right": ("on the right", "at the middle right", "on the right side"),
    "bottom left": ("in the bottom left corner", "at the bottom left", "in the lower left"),
    "bottom center": ("at the bottom", "at the bottom center", "in the lower middle"),
    "bottom right": ("in the bottom right corner", "at the bottom right", "in the lower right"),
}
SINGLE_TEMPLATES = (
    "a {size} {colour} {shape} {where}",
    "there is a {size} {colour} {shape} {where}",
    "{where_cap} there is a {size} {colour} {shape}",
    "a {colour} {shape} of {size} size {where}",
    "the picture shows a {size} {colour} {shape} {where}",
    "one {size} {shape} , coloured {colour} , {where}",
    "a {size} {shape} in {colour} sits {where}",
)
MULTI_TEMPLATES = (
    "{o1} {rel} {o2}",
    "there is {o1} {rel} {o2}",
    "the picture shows {o1} {rel} {o2}",
    "{o1} is {rel} {o2}",
    "we see {o1} placed {rel} {o2}",
    "an image with {o1} {rel} {o2}",
)
THIRD_TEMPLATES = (", and {o3} {where}", "; {o3} is {where}", "and {o3} {where}")


@dataclass(frozen=True)
class SyntheticConfig:
    """Parameters of the generated dataset; they key its directory so changes regenerate it."""

    num_train: int = 3000
    num_val: int = 300
    num_test: int = 600
    image_size: int = 128
    max_objects: int = 3
    noise_std: float = 8.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.max_objects <= 9:
            raise UserError(f"data.max_objects must be in 1..9, got {self.max_objects}")
        if self.image_size < 48:
            raise UserError(f"data.image_size must be >= 48 pixels, got {self.image_size}")

    def key(self) -> str:
        """Short hash of every parameter plus the generator version."""
        return fingerprint({**asdict(self), "version": GENERATOR_VERSION}, length=10)


GENERATOR_VERSION = 1


def _phrase(obj: dict, rng: random.Random) -> str:
    size = rng.choice(SIZE_WORDS[obj["size"]])
    return f"a {size} {obj['colour']} {obj['shape']}"


def _relation(a: dict, b: dict) -> str:
    """Spatial relation of object a to object b, from their grid cells."""
    if a["row"] != b["row"]:
        return "above" if a["row"] < b["row"] else "below"
    return "to the left of" if a["col"] < b["col"] else "to the right of"


def _caption(objects: list[dict], rng: random.Random) -> str:
    if len(objects) == 1:
        o = objects[0]
        where = rng.choice(POSITION_PHRASES[o["position"]])
        text = rng.choice(SINGLE_TEMPLATES).format(
            size=rng.choice(SIZE_WORDS[o["size"]]),
            colour=o["colour"],
            shape=o["shape"],
            where=where,
            where_cap=where,
        )
        return text
    a, b, *rest = rng.sample(objects, len(objects))
    text = rng.choice(MULTI_TEMPLATES).format(
        o1=_phrase(a, rng), o2=_phrase(b, rng), rel=_relation(a, b)
    )
    for c in rest:
        where = rng.choice(POSITION_PHRASES[c["position"]])
        text += " " + rng.choice(THIRD_TEMPLATES).format(o3=_phrase(c, rng), where=where)
    return text


def tokenize_caption(text: str) -> list[str]:
    """The generator's own tokenisation: lower-case, split on spaces (punctuation is spaced)."""
    return text.lower().split()


def _draw(draw: ImageDraw.ImageDraw, shape: str, box: tuple[int, int, int, int], rgb) -> None:
    x0, y0, x1, y1 = box
    if shape == "circle":
        draw.ellipse(box, fill=rgb)
    elif shape == "square":
        draw.rectangle(box, fill=rgb)
    else:  # triangle, apex up
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=rgb)


def make_scene(rng: random.Random, cfg: SyntheticConfig) -> tuple[np.ndarray, list[dict]]:
    """One image (H, W, 3) uint8 and its objects, each in its own 3x3 cell (so none overlap)."""
    s = cfg.image_size
    cell = s / 3
    n = rng.randint(1, cfg.max_objects)
    cells = rng.sample(range(9), n)
    noise = np.random.default_rng(rng.getrandbits(32)).normal(0, cfg.noise_std, (s, s, 3))
    img = Image.fromarray(np.clip(235 + noise, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    objects = []
    for k in cells:
        r, c = divmod(k, 3)
        size = rng.choice(SIZES)
        side = int(cell * (rng.uniform(0.72, 0.86) if size == "large" else rng.uniform(0.36, 0.46)))
        # Jitter inside the cell, never crossing its border.
        x0 = int(c * cell + rng.uniform(0.04, 0.96) * (cell - side - 2)) + 1
        y0 = int(r * cell + rng.uniform(0.04, 0.96) * (cell - side - 2)) + 1
        box = (x0, y0, x0 + side, y0 + side)
        obj = {
            "shape": rng.choice(SHAPES),
            "colour": rng.choice(list(COLOURS)),
            "size": size,
            "position": POSITIONS[k],
            "row": r,
            "col": c,
            "bbox": list(box),  # pixels, [x0, y0, x1, y1]
        }
        _draw(draw, obj["shape"], box, COLOURS[obj["colour"]])
        objects.append(obj)
    return np.asarray(img), objects


def generate(root: str | os.PathLike, cfg: SyntheticConfig, num_captions: int = 5) -> Path:
    """Write images and `dataset.json` under root/<key>/ (atomically) and return the JSON path."""
    out = Path(root) / f"synthetic_{cfg.key()}"
    json_path = out / "dataset.json"
    if json_path.exists():
        return json_path
    (out / "images").mkdir(parents=True, exist_ok=True)
    rng = random.Random(cfg.seed)
    images = []
    splits = ["train"] * cfg.num_train + ["val"] * cfg.num_val + ["test"] * cfg.num_test
    # The same kind of progress bar as feature extraction's (rate and ETA), on stderr.
    for imgid, split in enumerate(tqdm(splits, unit="img", desc="dataset", dynamic_ncols=True)):
        pixels, objects = make_scene(rng, cfg)
        filename = f"{imgid:06d}.png"
        Image.fromarray(pixels).save(out / "images" / filename)
        raws: list[str] = []
        for _ in range(1000):  # five *different* captions; the phrase space is far larger
            text = _caption(objects, rng)
            if text not in raws:
                raws.append(text)
            if len(raws) == num_captions:
                break
        images.append(
            {
                "filename": filename,
                "filepath": "images",
                "imgid": imgid,
                "split": split,
                "sentences": [
                    {"raw": t, "tokens": tokenize_caption(t), "imgid": imgid} for t in raws
                ],
                "objects": objects,
            }
        )
    meta = {"dataset": "synthetic", "config": asdict(cfg), "version": GENERATOR_VERSION}
    tmp = json_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**meta, "images": images}))
    tmp.replace(json_path)  # readers never see a half-written file
    return json_path
