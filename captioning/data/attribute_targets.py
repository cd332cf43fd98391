"""Multi-label attribute targets of a built-in image, for pretraining an encoder without
downloads (scripts/pretrain_encoder.py): which (colour, shape) and (size, shape) pairs and which
positions its objects have. Pairs, not single words, so the labels bind colour to shape."""

from __future__ import annotations

from .synthetic import COLOURS, POSITIONS, SHAPES, SIZES

LABELS = ([f"{c} {s}" for c in COLOURS for s in SHAPES] + [f"{z} {s}" for z in SIZES for s in SHAPES]
          + [f"at {p}" for p in POSITIONS])
_INDEX = {label: i for i, label in enumerate(LABELS)}


def attribute_labels(objects: list[dict]) -> list[int]:
    """A built-in record's `objects` -> the indices (into LABELS) that are true for the image."""
    on = set()
    for o in objects:
        on |= {_INDEX[f"{o['colour']} {o['shape']}"], _INDEX[f"{o['size']} {o['shape']}"],
               _INDEX[f"at {o['position']}"]}
    return sorted(on)
