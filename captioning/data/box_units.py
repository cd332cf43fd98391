"""Boxes given in pixels (`encoder.box_units=pixels`) made unit boxes: each image's width and
height, from COCO annotation files (`encoder.image_sizes`) or from the image file's header."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from PIL import Image

from ..errors import UserError
from .records import ImageRecord

log = logging.getLogger(__name__)


def to_unit_boxes(box: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(N, 4) pixel boxes (x1, y1, x2, y2) of an image of `size` (width, height) -> divided by
    it, float32."""
    w, h = size
    return np.asarray(box, np.float32) / np.asarray([w, h, w, h], np.float32)


def image_sizes(enc: dict, records: list[ImageRecord]) -> dict[str, tuple[int, int]]:
    """{image id: (width, height)} for box_units=pixels: from the COCO annotation files named
    by encoder.image_sizes (their images[] entries), else from each record's image file (its
    header only). Images with no size are left out (their rows are skipped by name)."""
    if enc.get("image_sizes"):
        return annotation_sizes(enc["image_sizes"])
    sizes, missing = {}, []
    for r in records:
        try:
            with Image.open(r.path) as im:
                sizes[str(r.image_id)] = im.size
        except (OSError, ValueError):
            missing.append(str(r.path))
    if missing and len(missing) == len(records):
        raise UserError(f"encoder.box_units=pixels needs each image's size, and none of the "
                        f"{len(records)} image files can be read (e.g. {missing[0]}); give the "
                        "COCO annotations instead: encoder.image_sizes=[<instances or captions "
                        "_train2014.json>, <..._val2014.json>]")
    if missing:
        log.warning("features: %d images without a readable file have no size for their pixel "
                    "boxes (e.g. %s): their rows are skipped", len(missing), missing[0])
    return sizes


def annotation_sizes(files: list[str]) -> dict[str, tuple[int, int]]:
    """{image id: (width, height)} from COCO-format annotation files (images[]: id, width,
    height)."""
    sizes = {}
    for name in files:
        path = Path(name).expanduser()
        try:
            images = json.loads(path.read_text())["images"]
            sizes.update({str(i["id"]): (int(i["width"]), int(i["height"])) for i in images})
        except FileNotFoundError:
            raise UserError(f"encoder.image_sizes: {path} does not exist") from None
        except (ValueError, KeyError, TypeError) as err:
            raise UserError(f"encoder.image_sizes: {path} is not a COCO annotation file with "
                            f"images[] of id, width and height ({type(err).__name__}: {err})") from None
    return sizes
