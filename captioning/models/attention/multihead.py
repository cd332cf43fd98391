"""Multi-head cross-attention: H heads over per-head projections of queries, keys and values."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from torch import nn

from ...rules import at_least
from ..cpu_speed import half_tanh_
from .base import CrossAttention, Prepared, full_precision, masked_softmax, register


class _MultiHead(CrossAttention):
    """Shared machinery: values projected per head, heads concatenated, output projection to
    Dv. Returned weights are the mean over heads (as nn.MultiheadAttention returns them)."""

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None, num_heads: int,
                 head_dim: int | None) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        self.h = num_heads
        self.dh = head_dim or query_dim // num_heads
        if self.dh * num_heads == 0:
            raise ValueError(f"attention.num_heads={num_heads} is too many for query_dim={query_dim}")
        self.v_proj = nn.Linear(self.value_dim, self.h * self.dh)
        self.out_proj = nn.Linear(self.h * self.dh, self.value_dim)

    def _split(self, x: torch.Tensor, d: int) -> torch.Tensor:
        """(B, L, H*d) -> (B, H, L, d)."""
        return x.unflatten(-1, (self.h, d)).transpose(1, 2)

    def prepare(self, keys, mask=None, values=None) -> Prepared:
        values = keys if values is None else values
        v = self._split(self.v_proj(values), self.dh)  # (B, H, N, dh)
        return Prepared(self._prepare_keys(keys), v, mask)

    def _head_scores(self, q: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """q (B, T, Dq) -> scores (B, H, T, N)."""
        raise NotImplementedError

    def _attend(self, query, prepared):
        scores = self._head_scores(query, prepared.keys)  # (B, H, T, N)
        b, h, t, n = scores.shape
        mask = None if prepared.mask is None else prepared.mask.repeat_interleave(h, 0)
        weights = masked_softmax(scores.flatten(0, 1), mask).view(b, h, t, n)
        context = (weights @ prepared.values).transpose(1, 2).flatten(2)  # (B, T, H*dh)
        return self.out_proj(context), weights.mean(1)  # (B, T, Dv), (B, T, N)


@register("multihead_dot")
class MultiHeadDotAttention(_MultiHead):
    """Scaled dot-product per head; with Dv == Dq it is nn.MultiheadAttention(Dq, H, kdim=Dk)."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'multihead_dot': (
            'H=8 heads of scaled dot-product (= `nn.MultiheadAttention`, kdim 2048)',
            'several things attended at once'),
    }

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None,
                 num_heads: Annotated[int, at_least(1)] = 8, head_dim: int | None = None) -> None:
        super().__init__(query_dim, key_dim, value_dim, num_heads, head_dim)
        self.q_proj = nn.Linear(query_dim, self.h * self.dh)
        self.k_proj = nn.Linear(key_dim, self.h * self.dh)

    def _prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self._split(self.k_proj(keys), self.dh)  # (B, H, N, dh)

    def _head_scores(self, q, keys):
        q = self._split(self.q_proj(q), self.dh)  # (B, H, T, dh)
        return q @ keys.transpose(-1, -2) / math.sqrt(self.dh)  # (B, H, T, N)


@register("multihead_additive")
class MultiHeadAdditiveAttention(_MultiHead):
    """Each head has its own W1, W2 and v: score_h = v_h^T tanh(W1_h q + W2_h k).
    `head_attn_dim` defaults to attn_dim / H (the same total width as single-head additive)."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'multihead_additive': (
            'H=8 heads, each its own W1, W2, v',
            'additive with several heads; `attention=multihead_additive attention.head_attn_dim=512` gives '
            'every head the full width (11,019,264)'),
    }

    def __init__(self, query_dim: int, key_dim: int, value_dim: int | None = None,
                 num_heads: Annotated[int, at_least(1)] = 8, head_dim: int | None = None,
                 attn_dim: Annotated[int, at_least(1)] = 512,
                 head_attn_dim: int | None = None) -> None:
        super().__init__(query_dim, key_dim, value_dim, num_heads, head_dim)
        self.a = head_attn_dim or attn_dim // num_heads
        self.w_query = nn.Linear(query_dim, self.h * self.a, bias=False)
        self.w_key = nn.Linear(key_dim, self.h * self.a)
        self.v = nn.Parameter(torch.randn(self.h, self.a) / math.sqrt(self.a))

    def _prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        # float32 under autocast too, as single-head additive (its _prepare_keys says why)
        return self._split(self.w_key(keys).float(), self.a)  # (B, H, N, a)

    def _head_scores(self, q, keys):
        q = self._split(self.w_query(q).float(), self.a)  # (B, H, T, a)
        s = half_tanh_(q.unsqueeze(3), keys.unsqueeze(2))  # (B, H, T, N, a): tanh = 2 s - 1
        with full_precision(s):
            scores = torch.einsum("bhtna,ha->bhtn", s, self.v)  # (B, H, T, N)
            return 2 * scores - self.v.sum(-1)[:, None, None]
