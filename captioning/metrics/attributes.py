"""Attribute accuracy: does a caption of a single-object image name its colour, shape and
position correctly (and nothing contradictory)? Uses the built-in generator's lexicon."""

from __future__ import annotations

from ..data.synthetic import COLOURS, SHAPES, SIZE_WORDS

ATTRIBUTES = ("colour", "shape", "size", "position")

_ROW_WORDS = {"top": "top", "upper": "top", "bottom": "bottom", "lower": "bottom"}
_COL_WORDS = {"left": "left", "right": "right"}
_CENTRE_WORDS = {"center", "middle"}
_SIZE = {w: size for size, words in SIZE_WORDS.items() for w in words}


def _positions(tokens: list[str]) -> set[str]:
    """Canonical 3x3 cell names mentioned. Row and column words that stand next to each other
    (optionally with 'center'/'middle' between) form one position; the rest stand alone."""
    found = set()
    i = 0
    while i < len(tokens):
        w = tokens[i]
        if w in _ROW_WORDS:
            row = _ROW_WORDS[w]
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
            if nxt in _COL_WORDS:
                found.add(f"{row} {_COL_WORDS[nxt]}")
                i += 2
                continue
            found.add(f"{row} center")
            i += 2 if nxt in _CENTRE_WORDS else 1
            continue
        if w == "middle" and i + 1 < len(tokens) and tokens[i + 1] in _COL_WORDS:
            found.add(f"middle {_COL_WORDS[tokens[i + 1]]}")
            i += 2
            continue
        if w in _COL_WORDS:
            found.add(f"middle {_COL_WORDS[w]}")
        elif w in _CENTRE_WORDS:
            found.add("center")
        i += 1
    return found


def parse_attributes(tokens: list[str]) -> dict[str, set[str]]:
    """Every colour, shape, size and position a caption names."""
    return {
        "colour": {w for w in tokens if w in COLOURS},
        "shape": {w for w in tokens if w in SHAPES},
        "size": {_SIZE[w] for w in tokens if w in _SIZE},
        "position": _positions(tokens),
    }


def attribute_errors(tokens: list[str], obj: dict) -> dict:
    """One single-object image's caption against its object: {"attributes": {name: wrong}}
    (wrong: the caption does not name exactly the object's value, as attribute_accuracy counts),
    "words": [positions of the tokens that name a wrong value]}."""
    named = parse_attributes(tokens)
    wrong = {a: named[a] != {obj[a]} for a in ATTRIBUTES}
    bad_position = bool(named["position"] - {obj["position"]})
    where = set(_ROW_WORDS) | set(_COL_WORDS) | _CENTRE_WORDS
    words = [t for t, w in enumerate(tokens)
             if (w in COLOURS and w != obj["colour"]) or (w in SHAPES and w != obj["shape"])
             or (w in _SIZE and _SIZE[w] != obj["size"]) or (bad_position and w in where)]
    return {"attributes": wrong, "words": words}


def attribute_accuracy(
    captions: list[list[str]], objects: list[list[dict]], prefix: str = ""
) -> dict[str, float]:
    """Over single-object images: share of captions naming exactly the right colour, shape and
    position ({prefix}attr_acc) and each attribute alone ({prefix}attr_acc_<name>).
    Returns {} when there is no single-object image with ground truth (e.g. real datasets)."""
    pairs = [(c, objs[0]) for c, objs in zip(captions, objects) if len(objs) == 1]
    if not pairs:
        return {}
    correct = {a: 0 for a in ATTRIBUTES}
    joint = 0
    for caption, obj in pairs:
        ok = {a: not bad for a, bad in attribute_errors(caption, obj)["attributes"].items()}
        for a in ATTRIBUTES:
            correct[a] += ok[a]
        joint += ok["colour"] and ok["shape"] and ok["position"]
    n = len(pairs)
    out = {f"{prefix}attr_acc": joint / n}
    out.update({f"{prefix}attr_acc_{a}": correct[a] / n for a in ATTRIBUTES})
    return out

