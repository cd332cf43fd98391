"""Reader for Karpathy-split JSON (Flickr8k/30k, COCO and the built-in dataset).

The rules for a Karpathy entry live here and nowhere else: `restval` is training data, an
image's id is its `cocoid`, else `imgid`, else its filename (as predictions.json writes it),
and a sentence's tokens are its `tokens` field (else its `raw` text) through `tokenize`, so
every reference token is a word the tokenizer produces and scoring a caption string gives
back exactly the tokens it was written from.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .vocab import tokenize

SPLITS = ("train", "val", "test")


@dataclass(slots=True)
class ImageRecord:
    """One image: its file, split, id for COCO results, references (tokenised, and as written
    for coco-caption's own tokenizer), ground truth objects (built-in data)."""

    path: Path
    split: str
    image_id: int | str
    captions: list[list[str]]
    texts: list[str] = field(default_factory=list)
    objects: list[dict] = field(default_factory=list)
    empty_captions: int = 0  # captions with no word left after tokenisation (dropped)


def split_of(image: dict) -> str | None:
    """The split of a Karpathy `images[]` entry; `restval` counts as train."""
    return "train" if image.get("split") == "restval" else image.get("split")


def image_id_of(image: dict) -> int | str:
    """The id predictions.json uses for a Karpathy `images[]` entry."""
    return image.get("cocoid", image.get("imgid", image.get("filename")))


def sentence_tokens(sentence: dict) -> list[str]:
    """Reference tokens of a Karpathy `sentences[]` entry (see the module docstring). Interned:
    a dataset repeats a few thousand words millions of times, one string object each."""
    tokens = sentence.get("tokens")
    return [sys.intern(w) for w in tokenize(" ".join(tokens) if tokens else sentence.get("raw", ""))]


def sentence_text(sentence: dict) -> str:
    """A sentence as written (coco-caption tokenises this itself)."""
    return sentence.get("raw") or " ".join(sentence.get("tokens", []))


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


def image_root_of(json_path: str | Path, image_root: str | Path | None = None) -> Path:
    """Where a dataset's images are: `image_root`, else the JSON's folder. No image path may
    leave it (captioning.data.images.outside_root)."""
    return Path(image_root) if image_root else Path(json_path).parent


def check_image_root(root: Path) -> Path:
    if not root.is_dir():
        raise FileNotFoundError(f"image directory not found: {root}; set data.image_root")
    return root


def make_record(path: Path, split: str, image_id: int | str, sentences: list[dict],
                objects: list[dict] | None = None) -> ImageRecord:
    """An ImageRecord from Karpathy-style sentences ({"tokens"} and/or {"raw"}); every format's
    reader builds its records here, so the caption rules are the same for all."""
    tokens = [sentence_tokens(s) for s in sentences]
    # A caption with no word (empty, or punctuation only) teaches nothing: dropped, counted.
    kept = [(t, sentence_text(s)) for t, s in zip(tokens, sentences) if any(w[0].isalnum() for w in t)]
    return ImageRecord(path, split, image_id, [t for t, _ in kept], [text for _, text in kept],
                       list(objects or []), empty_captions=len(sentences) - len(kept))


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
