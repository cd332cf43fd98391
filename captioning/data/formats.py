"""Dataset formats besides Karpathy-split JSON, read into the same ImageRecords:

- `coco`: a COCO captions annotation file (`captions_train2014.json`: images[{id, file_name}],
  annotations[{image_id, caption}]) with the split of each image from a Karpathy JSON
  (`data.split_file`, matched by COCO id, else file name) or one split for the whole file
  (`data.split=train|val|test`).
- `csv`: a header row and `image,caption[,split]` rows, one per caption.
- `jsonl`: one `{"image": ..., "caption": ..., "split": ...}` object per line.

Image paths are relative to the image root; captions follow the same rules as Karpathy's
(`captioning.data.karpathy`: tokenised by the project's tokenizer, no-word captions dropped).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..errors import UserError
from ..schema.data import DATA_FORMATS
from .karpathy import load_karpathy, read_karpathy, split_of
from .records import SPLITS, ImageRecord, check_image_root, image_root_of, make_record

FORMATS = DATA_FORMATS  # data.format's values (their home: the schema)


def load_records(path: str | Path, image_root: str | Path | None, fmt: str = "karpathy",
                 split_file: str | None = None, split: str | None = None) -> list[ImageRecord]:
    """Records of a dataset file in any supported format (see the module docstring)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown data.format '{fmt}'; valid: {', '.join(FORMATS)}")
    if fmt == "karpathy":
        return load_karpathy(path, image_root)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset file not found: {path}; set data.json_path")
    root = check_image_root(image_root_of(path, image_root))
    if fmt == "coco":
        images = _coco(path, split_file, split)
    else:
        rows = _csv_rows(path) if fmt == "csv" else _jsonl_rows(path)
        images = _group(rows, path)
    return [make_record(root / name, s, image_id, [{"raw": c} for c in caps])
            for name, s, image_id, caps in images]


def coco_captions(data: dict) -> dict:
    """A COCO captions file's annotations -> {image_id: [caption, ...]} in file order: the one
    reading of COCO annotations (training's reader here, score.py's references)."""
    captions: dict = {}
    for a in data["annotations"]:
        captions.setdefault(a["image_id"], []).append(a["caption"])
    return captions


def _coco(path: Path, split_file: str | None, split: str | None) -> list[tuple]:
    data = json.loads(path.read_text())
    if "annotations" not in data or "images" not in data:
        raise UserError(f"{path} is not a COCO captions file (needs 'images' and 'annotations')")
    if (split_file is None) == (split is None):
        raise UserError("data.format=coco needs exactly one of data.split_file (a Karpathy JSON "
                         "giving each image's split) or data.split (one split for the whole file)")
    # Every split the split file gives an image (one, unless the file lists it twice: then the
    # image appears once per split, and the dataset checks refuse a train/val or train/test one).
    by_id: dict = {}
    if split_file:
        for img in read_karpathy(split_file):
            for key in (img.get("cocoid", img["filename"]), img["filename"]):
                by_id.setdefault(key, []).append(split_of(img))
    captions = coco_captions(data)
    out = []
    for img in data["images"]:
        splits = [split] if split else by_id.get(img["id"], by_id.get(Path(img["file_name"]).name))
        if not splits:
            raise UserError(f"{path}: image {img['id']} ({img['file_name']}) is not in {split_file}")
        out += [(img["file_name"], s, img["id"], captions.get(img["id"], [])) for s in dict.fromkeys(splits)]
    return out


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if rows and not {"image", "caption"} <= set(rows[0]):
        raise UserError(f"{path}: the header must name the columns image,caption[,split]; "
                         f"got {list(rows[0])}")
    return rows


def _jsonl_rows(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise UserError(f"{path}:{n} is not a JSON object ({err})") from err
    return rows


def _group(rows: list[dict], path: Path) -> list[tuple]:
    """One entry per image (first-seen order) with all its captions; split per image."""
    images: dict[str, tuple] = {}
    for n, row in enumerate(rows, 1):
        if "image" not in row or "caption" not in row:
            raise UserError(f"{path}: row {n} needs 'image' and 'caption'")
        s = row.get("split") or None
        if s not in SPLITS:
            raise UserError(f"{path}: row {n} has split {s!r}; give a split column: {', '.join(SPLITS)}")
        name = row["image"]
        entry = images.setdefault(name, (name, s, name, []))
        if entry[1] != s:
            raise UserError(f"{path}: row {n} puts {name} in {s}, an earlier row in {entry[1]}")
        entry[3].append(row["caption"])
    return list(images.values())

