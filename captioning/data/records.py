"""The record rules every dataset format shares (Karpathy JSON, COCO, CSV, JSONL, the built-in
data): what an image record holds, how a sentence becomes reference tokens (its `tokens` field,
else its `raw` text, through `tokenize`, so every reference token is a word the tokenizer
produces and scoring a caption string gives back exactly the tokens it was written from), which
captions are dropped (no word left), and where a dataset's images are. Each format's reader
(data/karpathy.py, data/formats.py) builds its records with `make_record`."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

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


def sentence_tokens(sentence: dict) -> list[str]:
    """Reference tokens of a Karpathy `sentences[]` entry (see the module docstring). Interned:
    a dataset repeats a few thousand words millions of times, one string object each."""
    tokens = sentence.get("tokens")
    return [sys.intern(w) for w in tokenize(" ".join(tokens) if tokens else sentence.get("raw", ""))]


def sentence_text(sentence: dict) -> str:
    """A sentence as written (coco-caption tokenises this itself)."""
    return sentence.get("raw") or " ".join(sentence.get("tokens", []))


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
