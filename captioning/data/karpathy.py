"""Reader for Karpathy-split JSON (Flickr8k/30k, COCO and the built-in dataset).

The rules for a Karpathy entry live here and nowhere else: `restval` is training data, and an
image's id is its `cocoid`, else `imgid`, else its filename (as predictions.json writes it).
The rules every format shares (records, reference tokens, dropped captions, the image root)
are data/records.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError
from .records import SPLITS, ImageRecord, check_image_root, image_root_of, make_record


def split_of(image: dict) -> str | None:
    """The split of a Karpathy `images[]` entry; `restval` counts as train."""
    return "train" if image.get("split") == "restval" else image.get("split")


def image_id_of(image: dict) -> int | str:
    """The id predictions.json uses for a Karpathy `images[]` entry."""
    return image.get("cocoid", image.get("imgid", image.get("filename")))


def read_karpathy(json_path: str | Path) -> list[dict]:
    """The `images` list of a Karpathy-split JSON, with errors that say what to fix."""
    json_path = Path(json_path)
    if not json_path.is_file():
        raise FileNotFoundError(
            f"dataset JSON not found: {json_path}. Set data.json_path to a Karpathy-split "
            "dataset_*.json (see data/README.md), or use data=synthetic."
        )
    try:
        return json.loads(json_path.read_text())["images"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{json_path} is not a Karpathy-split JSON (needs 'images'): {err}") from err


def load_karpathy(json_path: str | Path, image_root: str | Path | None = None) -> list[ImageRecord]:
    """Records of a Karpathy-split JSON. Image paths are image_root/filepath/filename.
    Captions with no word after tokenisation are dropped and counted per record."""
    json_path = Path(json_path)
    images = read_karpathy(json_path)
    root = check_image_root(image_root_of(json_path, image_root))
    records = []
    for i, img in enumerate(images):
        split = split_of(img)
        if split not in SPLITS:
            raise UserError(f"{json_path}: images[{i}] has split {img.get('split')!r}")
        records.append(make_record(root / img.get("filepath", "") / img["filename"], split,
                                   image_id_of(img), img.get("sentences", []), img.get("objects", [])))
    return records
