"""Attention grounding: when the model says an object's colour or shape, does it look at that
object? Needs per-object boxes (the built-in dataset has them); real datasets return {}."""

from __future__ import annotations

import torch

from ..data.synthetic import COLOURS, SHAPES


def box_cells(bbox: list[float], image_size: float, side: int) -> torch.Tensor:
    """Fraction of each grid cell covered by the box: (side * side,), row-major like the
    features. bbox = [x0, y0, x1, y1] in pixels of an image_size x image_size image."""
    edges = torch.linspace(0, image_size, side + 1)
    lo, hi = edges[:-1], edges[1:]

    def cover(a: float, b: float) -> torch.Tensor:  # (side,) share of each interval in [a, b]
        return ((torch.clamp(hi, max=b) - torch.clamp(lo, min=a)).clamp_min(0)) / (hi - lo)

    x0, y0, x1, y1 = bbox
    return (cover(y0, y1)[:, None] * cover(x0, x1)[None, :]).flatten()


def attention_grounding(
    captions: list[list[str]],
    weights: list[torch.Tensor],
    objects: list[list[dict]],
    image_size: float,
    side: int,
    prefix: str = "",
) -> dict[str, float]:
    """For each generated word that names a colour or shape carried by exactly one object of
    its image: the attention mass inside that object's box (cells weighted by how much of
    them the box covers), against the share uniform attention would give (box area / image).

    captions[i] (L_i words), weights[i] (>= L_i, N) the attention when word t was generated,
    over a side x side grid (N = side^2, row-major; the caller knows the layout).
    -> {grounding, grounding_uniform, grounding_ratio, grounding_words} ({} if no such word).
    """
    mass, uniform = [], []
    for words, w, objs in zip(captions, weights, objects):
        if not objs or "bbox" not in objs[0]:
            continue
        for t, word in enumerate(words):
            key = "colour" if word in COLOURS else "shape" if word in SHAPES else None
            owners = [o for o in objs if key and o[key] == word]
            if len(owners) != 1:  # not an attribute word, or ambiguous: no single target
                continue
            cells = box_cells(owners[0]["bbox"], image_size, side)  # (N,)
            mass.append(float(w[t].float() @ cells))
            uniform.append(float(cells.mean()))
    if not mass:
        return {}
    m, u = sum(mass) / len(mass), sum(uniform) / len(uniform)
    return {f"{prefix}grounding": m, f"{prefix}grounding_uniform": u,
            f"{prefix}grounding_ratio": m / u, f"{prefix}grounding_words": float(len(mass))}
