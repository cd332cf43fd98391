"""Dot-product attention: score = q^T k (optionally / sqrt(d)); Dq != Dk needs a projection."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from torch import nn

from ...rules import at_least
from .base import CrossAttention, masked_softmax, register
from .position import RelativePositionBias2d


@register("dot", scaled=False)
@register("scaled_dot", scaled=True)
class DotAttention(CrossAttention):
    """`project`: 'keys' maps keys to Dq once per image (cheap per step), 'query' maps the query
    to Dk at every step, 'none' requires Dq == Dk. 'auto' = keys when the widths differ."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'dot': (
            'q^T (W k); W only when Dq != Dk (`attention=dot attention.project=query` moves it to the query)',
            'cheapest per step; no parameters at matched widths'),
        'scaled_dot': (
            'q^T (W k) / sqrt(d)',
            'dot with large d, where unscaled scores saturate the softmax'),
    }

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        scaled: bool = False,
        project: str = "auto",
        init: str = "default",
        position_bias: str = "none",
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        if position_bias not in ("none", "relative_2d"):
            raise ValueError(f"attention.position_bias must be none|relative_2d, got '{position_bias}'")
        self.pos_bias = RelativePositionBias2d(query_dim) if position_bias == "relative_2d" else None
        if project == "auto":
            project = "none" if query_dim == key_dim else "keys"
        if project not in ("keys", "query", "none"):
            raise ValueError(f"attention.project must be auto|keys|query|none, got '{project}'")
        if project == "none" and query_dim != key_dim:
            raise ValueError(
                f"attention.project=none needs query_dim == key_dim, got {query_dim} != {key_dim}; "
                "use project=keys or project=query"
            )
        self.project = project
        self.proj = None
        if project == "keys":
            self.proj = nn.Linear(key_dim, query_dim, bias=False)
        elif project == "query":
            self.proj = nn.Linear(query_dim, key_dim, bias=False)
        dim = key_dim if project in ("query", "none") else query_dim
        self.scale = 1.0 / math.sqrt(dim) if scaled else 1.0
        if init == "matched" and self.proj is not None:
            # Projected side gets the scale of a unit-variance input, like the other side.
            nn.init.normal_(self.proj.weight, std=self.proj.in_features**-0.5)
        elif init not in ("default", "matched"):
            raise ValueError(f"attention.init must be 'default' or 'matched', got '{init}'")

    def _prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.proj(keys) if self.project == "keys" else keys  # (B, N, D)

    def _scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        scores = (self.proj(query) if self.project == "query" else query) @ keys.transpose(1, 2)
        return scores * self.scale  # (B, T, N)

    def _biased_scores(self, query: torch.Tensor, prepared) -> torch.Tensor:
        """Scores plus the relative position bias (on the grid, or on the regions' boxes)."""
        scores = self._scores(query, prepared.keys)  # (B, T, N)
        if self.pos_bias is not None:
            scores = scores + self.pos_bias(query, scores.shape[-1], prepared.positions)
        return scores

    def _weights(self, query: torch.Tensor, prepared) -> torch.Tensor:
        return masked_softmax(self._biased_scores(query, prepared), prepared.mask)


@register("general")
class GeneralAttention(DotAttention):
    """Luong's bilinear score q^T W k: W (Dk -> Dq) is always learned, even when Dq == Dk."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'general': (
            'q^T W k (Luong bilinear; W always learned)',
            'a learned match even when widths are equal'),
    }

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None,
                 scaled: bool = False, init: str = "default", position_bias: str = "none") -> None:
        super().__init__(query_dim, key_dim, value_dim, scaled=scaled, project="keys", init=init,
                         position_bias=position_bias)


@register("sparse_topk")
class SparseTopKAttention(DotAttention):
    """Scaled dot-product where only the `topk` best-scoring positions keep weight."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'sparse_topk': (
            'scaled dot, only the `topk` (4) best positions keep weight',
            'a sharp, interpretable focus'),
    }

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None,
                 topk: Annotated[int, at_least(1)] = 4, project: str = "auto", init: str = "default",
                 position_bias: str = "none") -> None:
        super().__init__(query_dim, key_dim, value_dim, scaled=True, project=project, init=init,
                         position_bias=position_bias)
        if topk < 1:
            raise ValueError(f"attention.topk must be >= 1, got {topk}")
        self.topk = topk

    def _weights(self, query: torch.Tensor, prepared) -> torch.Tensor:
        scores = self._biased_scores(query, prepared)  # (B, T, N)
        if prepared.mask is not None:  # masked positions must not take a top-k place
            scores = scores.masked_fill(~prepared.mask[:, None, :], float("-inf"))
        if self.topk < scores.shape[-1]:
            kth = scores.topk(self.topk, dim=-1).values[..., -1:]  # (B, T, 1)
            scores = scores.masked_fill(scores < kth, float("-inf"))
        return masked_softmax(scores, prepared.mask)
