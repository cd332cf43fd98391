"""Local attention on the 2-D feature grid (Luong's local-p, in 2-D): the query predicts a
centre, and a Gaussian window around it multiplies the (renormalised) bilinear weights."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from torch import nn

from ...rules import at_least
from .base import CrossAttention, register
from .position import grid_coords


@register("local")
class LocalAttention(CrossAttention):
    """score = q^T W k / sqrt(Dq) - |pos - p(q)|^2 / (2 sigma^2), p(q) = (G-1) sigmoid(...),
    i.e. softmax(bilinear) times a Gaussian window, renormalised;
    the centre is a smooth function of the query, so its predictor learns by backprop.
    sigma = window / 2 grid cells."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'local': (
            'bilinear score − ‖pos − p(q)‖² / 2σ², p(q) a predicted 2-D centre',
            'compact objects: a soft 2-D window around a learned centre'),
    }

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None,
                 window: float = 2.0, centre_dim: Annotated[int, at_least(1)] = 128) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        self.proj = nn.Linear(key_dim, query_dim, bias=False)
        self.centre = nn.Sequential(nn.Linear(query_dim, centre_dim), nn.Tanh(), nn.Linear(centre_dim, 2))
        self.sigma = window / 2

    def _prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.proj(keys)  # (B, N, Dq)

    def _scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        n = keys.shape[1]
        coords, side = grid_coords(n, keys.device)  # (N, 2), (2,)
        centre = side * torch.sigmoid(self.centre(query))  # (B, T, 2) in grid units
        dist2 = ((coords - centre.unsqueeze(2)) ** 2).sum(-1)  # (B, T, N)
        scores = query @ keys.transpose(1, 2) / math.sqrt(self.query_dim)
        return scores - dist2 / (2 * self.sigma**2)
