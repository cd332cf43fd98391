"""Additive (Bahdanau) attention: score = v^T tanh(W1 q + W2 k)."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import nn

from ...rules import at_least
from ..cpu_speed import half_tanh_, half_tanh_reference
from .base import CrossAttention, full_precision, register


@register("additive")
class AdditiveAttention(CrossAttention):
    """W2 k is computed once per image in `prepare` (tutorials recompute it every step)."""

    # The tanh through torch's sigmoid (cpu_speed/half_tanh.py); False: through torch.tanh, the
    # control `scripts/benchmark.py --sections cpu_speed` times it against.
    tanh_through_sigmoid = True

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'additive': (
            'v^T tanh(W1 q + W2 k)',
            'the Show-Attend-Tell baseline; a learned non-linear match'),
    }

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        attn_dim: Annotated[int, at_least(1)] = 512,
        init: str = "default",  # or orthogonal
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        self.w_query = nn.Linear(query_dim, attn_dim, bias=False)  # W1
        self.w_key = nn.Linear(key_dim, attn_dim)  # W2 (+ the shared bias)
        self.v = nn.Linear(attn_dim, 1, bias=False)
        if init == "orthogonal":
            # Keeps tanh's input at unit scale whatever Dq and Dk are.
            nn.init.orthogonal_(self.w_query.weight)
            nn.init.orthogonal_(self.w_key.weight)
            nn.init.zeros_(self.w_key.bias)
            nn.init.normal_(self.v.weight, std=attn_dim**-0.5)
        elif init != "default":
            raise ValueError(f"attention.init must be 'default' or 'orthogonal', got '{init}'")

    def _prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        # float32 even under bf16 autocast: the (B, T, N, A) add and tanh below are elementwise
        # work, which a CPU does faster in fp32 than in bf16 (it has no bf16 arithmetic but dot
        # products: each bf16 element is converted), and more exactly; the projections stay bf16.
        return self.w_key(keys).float()  # (B, N, A), once per image

    def _scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = self.w_query(query).float()  # (B, T, A)
        # One (B, T, N, A) buffer, the largest tensor here: tanh(.) = 2 s - 1 (half_tanh_).
        half = half_tanh_ if self.tanh_through_sigmoid else half_tanh_reference
        s = half(q.unsqueeze(2), keys.unsqueeze(1))  # (B, T, N, A) float32
        with full_precision(s):  # v is a matrix-vector product: no gain from bf16, one cast less
            return 2 * self.v(s).squeeze(-1) - self.v.weight.float().sum()  # (B, T, N)
