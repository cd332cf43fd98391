"""Reference captions for scoring any predictions file: from a Karpathy-split JSON (the same
rules as training, captioning.data.karpathy) or a COCO captions annotation file."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ..errors import UserError
from .formats import coco_captions
from .karpathy import image_id_of, split_of
from .records import sentence_text, sentence_tokens
from .vocab import tokenize


def load_references(path: str | Path, split: str | None = None) -> tuple[dict, dict]:
    """-> ({image_id: [text]}, {image_id: [tokens]}): texts for coco-caption (its own
    tokenisation), tokens for nltk BLEU. `split` filters a Karpathy JSON (all when None)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        raise UserError(f"{path} is not JSON ({err}): give a Karpathy-split JSON or a COCO captions "
                        "file") from None
    texts: dict = defaultdict(list)
    tokens: dict = defaultdict(list)
    if "annotations" in data:
        for image_id, captions in coco_captions(data).items():
            texts[image_id] = captions
            tokens[image_id] = [tokenize(c) for c in captions]
    elif "images" in data and data["images"] and "sentences" in data["images"][0]:
        for img in data["images"]:
            if split and split_of(img) != split:
                continue
            key = image_id_of(img)
            texts[key] = [sentence_text(s) for s in img["sentences"]]
            tokens[key] = [sentence_tokens(s) for s in img["sentences"]]
    else:
        raise UserError(f"{path}: neither a Karpathy-split JSON (images[].sentences) nor a COCO "
                         "captions file (annotations[].caption)")
    return dict(texts), dict(tokens)
