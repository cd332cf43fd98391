"""Adaptive attention with a visual sentinel (Lu et al. 2017, "Knowing when to look").

The decoder may attend to nothing visual: a sentinel vector s_t joins the N grid cells in the
softmax, and the context is sum_i alpha_i v_i + beta_t W_v s_t. With the LSTM, s_t is Lu et
al.'s g_t * tanh(m_t), from the LSTM's input x_t, its previous state h_{t-1} and memory cell
(the decoder passes them: `memory=(x_t, c_{t-1})`; ours attends before the LSTM step, as
Show-Attend-Tell does, so the newest cell is c_{t-1} where Lu et al., attending after the step,
use c_t). The Transformer has no memory cell; its analogue is computed from the query (the
position's residual stream): s = sigmoid(W_g q) * tanh(W_m q).

The weights returned are the N grid weights; they sum to 1 - beta_t, so the sentinel's weight is
1 - their sum (what `val/attn_sentinel` averages and the attention figure shows as its own tile).
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch import nn

from ...rules import at_least
from .base import CrossAttention, Prepared, group_rows, masked_softmax, register


def sentinel_weight(weights: torch.Tensor) -> torch.Tensor:
    """(..., N) grid weights of an adaptive mode -> (...) the sentinel's weight, 1 - their sum."""
    return (1.0 - weights.float().sum(-1)).clamp_min(0.0)


@register("adaptive")
class AdaptiveAttention(CrossAttention):
    """Additive scores (v^T tanh(W_q q + W_k k)) for the cells and the sentinel alike.
    `input_dim`: the width of the decoder input x_t when the decoder passes its memory (the
    LSTM sets it to its embedding width); None: the sentinel comes from the query."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'adaptive': (
            'additive over the N cells + a visual sentinel s_t (LSTM: g_t * tanh(c_{t-1}), g_t from x_t and '
            'h_{t-1}; Transformer: from the query) in one softmax',
            'words with no visual evidence ("of", "the") may attend to nothing; `val/attn_sentinel` logs '
            "the sentinel's mean weight"),
    }

    has_sentinel = True
    from_decoder = ("input_dim",)

    def step_statistics(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"attn_sentinel": sentinel_weight(weights)}

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        attn_dim: Annotated[int, at_least(1)] = 512,
        input_dim: int | None = None,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        self.input_dim = input_dim
        self.w_query = nn.Linear(query_dim, attn_dim, bias=False)
        self.w_key = nn.Linear(key_dim, attn_dim)
        self.w_sentinel = nn.Linear(query_dim, attn_dim)
        self.v = nn.Linear(attn_dim, 1, bias=False)
        self.sentinel_value = nn.Linear(query_dim, self.value_dim)  # s_t into the values' space
        if input_dim is None:  # the Transformer's analogue, from the query
            self.gate = nn.Linear(query_dim, query_dim)
            self.memory = nn.Linear(query_dim, query_dim)
        else:  # Lu et al.: g_t = sigmoid(W_x x_t + W_h h_{t-1})
            self.gate_x = nn.Linear(input_dim, query_dim)
            self.gate_h = nn.Linear(query_dim, query_dim, bias=False)

    @property
    def takes_memory(self) -> bool:
        return self.input_dim is not None

    def _prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.w_key(keys)  # (B, N, A)

    def sentinel(self, q: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """q (R, T, Dq) [memory: x (R, [T,] E), c (R, [T,] Dq)] -> s (R, T, Dq)."""
        if self.input_dim is None:
            return torch.sigmoid(self.gate(q)) * torch.tanh(self.memory(q))
        if memory is None:
            raise ValueError("attention=adaptive built for a decoder memory (input_dim set): call "
                             "it with memory=(x_t, c_prev)")
        x, c = (m.unsqueeze(1) if m.dim() == 2 else m for m in memory)
        return torch.sigmoid(self.gate_x(x) + self.gate_h(q)) * torch.tanh(c)

    def forward(self, query: torch.Tensor, prepared: Prepared,
                memory: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """query (R, [T,] Dq) -> context (R, [T,] Dv), grid weights (R, [T,] N) summing to
        1 - the sentinel's weight. R may be G rows per prepared image (see CrossAttention)."""
        single = query.dim() == 2
        q = query.unsqueeze(1) if single else query  # (R, T, Dq)
        s = self.sentinel(q, memory)  # (R, T, Dq)
        rows, t = q.shape[:2]
        images = prepared.values.shape[0]
        q, s = group_rows(q, images), group_rows(s, images)  # (B, T', .): T' = G*T
        wq = self.w_query(q).unsqueeze(2)  # (B, T', 1, A)
        cells = self.v(torch.tanh(wq + prepared.keys.unsqueeze(1))).squeeze(-1)  # (B, T', N)
        own = self.v(torch.tanh(wq.squeeze(2) + self.w_sentinel(s)))  # (B, T', 1)
        mask = prepared.mask
        if mask is not None:  # the sentinel is always visible
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)  # (B, N + 1)
        both = masked_softmax(torch.cat([cells, own], -1), mask)  # (B, T', N + 1)
        weights, beta = both[..., :-1], both[..., -1:]
        context = weights.to(prepared.values.dtype) @ prepared.values + beta * self.sentinel_value(s)
        context, weights = context.reshape(rows, t, -1), weights.reshape(rows, t, -1)
        if single:
            return context.squeeze(1), weights.squeeze(1)
        return context, weights
