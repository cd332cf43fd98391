"""Reader for Karpathy-split JSON (Flickr8k/30k, COCO and the built-in dataset)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .vocab import tokenize

SPLITS = ("train", "val", "test")


@dataclass
class ImageRecord:
    """One image: its file, split, id for COCO results, tokenised references, ground truth."""

    path: Path
    split: str
    image_id: int | str
    captions: list[list[str]]
    objects: list[dict] = field(default_factory=list)


def load_karpathy(json_path: str | Path, image_root: str | Path | None = None) -> list[ImageRecord]:
    """Read a Karpathy-split JSON; `restval` counts as train. Image paths are
    image_root/filepath/filename (image_root defaults to the JSON's folder)."""
    json_path = Path(json_path)
    if not json_path.is_file():
        raise FileNotFoundError(
            f"dataset JSON not found: {json_path}. Set data.json_path to a Karpathy-split "
            "dataset_*.json (see data/README.md), or use data=synthetic."
        )
    root = Path(image_root) if image_root else json_path.parent
    if not root.is_dir():
        raise FileNotFoundError(f"image directory not found: {root}; set data.image_root")
    try:
        images = json.loads(json_path.read_text())["images"]
    except (json.JSONDecodeError, KeyError) as err:
        raise ValueError(f"{json_path} is not a Karpathy-split JSON (needs 'images'): {err}") from err
    records = []
    for i, img in enumerate(images):
        split = "train" if img.get("split") == "restval" else img.get("split")
        if split not in SPLITS:
            raise ValueError(f"{json_path}: images[{i}] has split {img.get('split')!r}")
        image_id = img.get("cocoid", img.get("imgid", img["filename"]))
        caps = [s.get("tokens") or tokenize(s["raw"]) for s in img["sentences"]]
        caps = [[w.lower() for w in c] for c in caps]
        path = root / img.get("filepath", "") / img["filename"]
        records.append(ImageRecord(path, split, image_id, caps, img.get("objects", [])))
    return records
