"""Linear (kernel feature-map) attention: weights ~ phi(q) . phi(k), phi = elu + 1, so the
context is phi(q)^T (sum_n phi(k_n) v_n^T) / phi(q)^T sum_n phi(k_n): O(N) per query."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .base import CrossAttention, Prepared, register


@dataclass
class LinearPrepared(Prepared):
    kv: torch.Tensor | None = None  # (B, D, Dv) sum_n phi(k_n) v_n^T
    ksum: torch.Tensor | None = None  # (B, D) sum_n phi(k_n)


def _phi(x: torch.Tensor) -> torch.Tensor:
    return nn.functional.elu(x) + 1  # positive, so weights are non-negative


@register("linear")
class LinearAttention(CrossAttention):
    """Keys are projected to Dq; masked positions get phi(k) = 0, hence exactly zero weight."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'linear': (
            'φ(q)·φ(Wk), φ = elu+1, context via Σφ(k)vᵀ',
            'many positions (O(N) per query)'),
    }

    weights_make_context = False  # the context comes from the O(N) summary, never the weights

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        self.proj = nn.Linear(key_dim, query_dim, bias=False)

    def prepare(self, keys, mask=None, values=None) -> LinearPrepared:
        values = keys if values is None else values
        k = _phi(self.proj(keys))  # (B, N, D)
        if mask is not None:
            k = k * mask.unsqueeze(-1).to(k.dtype)
        kv = k.transpose(1, 2) @ values  # (B, D, Dv): the O(N) summary, once per image
        return LinearPrepared(k, values, mask, kv=kv, ksum=k.sum(1))

    def _attend(self, query, prepared):
        q = _phi(query)  # (B, T, D)
        norm = (q @ prepared.ksum.unsqueeze(-1)).clamp_min(1e-12)  # (B, T, 1)
        context = (q @ prepared.kv) / norm  # (B, T, Dv), never touches N
        weights = (q @ prepared.keys.transpose(1, 2)) / norm  # (B, T, N), for diagnostics
        return context, weights
