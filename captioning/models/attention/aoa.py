"""Attention on attention (Huang et al. 2019, AoANet): a second attention step filters the first
one's result. The base mode attends as usual (context v); then from v and the query q
an information vector i = W_i [v; q] + b_i and a gate g = sigmoid(W_g [v; q] + b_g), and the
context is g * i: the gate can shut out an attended result that does not fit the query."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from .base import CrossAttention, Prepared, build_attention, register


@register("aoa")
class AttentionOnAttention(CrossAttention):
    """`base` (default multi-head scaled dot, as in AoANet) with `base_args`; the weights
    reported are the base mode's (where the information came from)."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'aoa': (
            "attention on attention: the base mode's (`multihead_dot`) context v and q give i = W_i[v;q], g "
            '= sigmoid(W_g[v;q]); context g * i',
            'filter out attended content that does not fit the query (AoANet)'),
    }

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        base: str = "multihead_dot",
        base_args: dict[str, Any] = MappingProxyType({"num_heads": 8}),  # the base mode's settings
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        if base == "aoa":
            raise ValueError("attention.base=aoa: attention on attention needs another mode as its base")
        self.inner = build_attention(base, query_dim, key_dim, value_dim, **(base_args or {}))
        self.weights_make_context = self.inner.weights_make_context
        self.information = nn.Linear(self.value_dim + query_dim, self.value_dim)
        self.gate = nn.Linear(self.value_dim + query_dim, self.value_dim)

    def extra_repr(self) -> str:
        return f"base={type(self.inner).__name__}"

    def prepare(self, keys, mask=None, values=None) -> Prepared:
        return self.inner.prepare(keys, mask, values)

    def _attend(self, query, prepared):
        """query (B, T, Dq) -> context (B, T, Dv), weights (B, T, N)."""
        attended, weights = self.inner._attend(query, prepared)  # (B, T, Dv)
        both = torch.cat([attended, query.to(attended.dtype)], -1)  # (B, T, Dv + Dq)
        return torch.sigmoid(self.gate(both)) * self.information(both), weights
