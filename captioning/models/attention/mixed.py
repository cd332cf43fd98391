"""The "mixed" rule (dot when widths match, else additive) and a learned gate between both."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from torch import nn

from ...rules import at_least
from .additive import AdditiveAttention
from .base import CrossAttention, Prepared, build_attention, register


def mixed_choice(query_dim: int, key_dim: int, dot: str = "dot") -> str:
    """The practitioners' rule: the dot mode when query and key widths match, else additive."""
    return dot if query_dim == key_dim else "additive"


@register("mixed")
class MixedAttention(CrossAttention):
    """Decided once at construction: `dot` (or `scaled_dot`) when Dq == Dk, else `additive`.
    The inner module is built exactly as `attention=<choice>` would build it, so a mixed run
    is identical to the run of the mode it picks (same seed, same numbers)."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'mixed': (
            '`dot` if Dq == Dk else `additive`, decided at construction (`attention=mixed '
            'attention.dot=scaled_dot` picks scaled dot)',
            "the practitioners' rule; `results.json` records `attention_resolved`"),
    }

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        attn_dim: Annotated[int, at_least(1)] = 512,
        dot: str = "dot",
        init: str = "default",
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        if dot not in ("dot", "scaled_dot"):
            raise ValueError(f"attention.dot must be 'dot' or 'scaled_dot', got '{dot}'")
        self.choice = mixed_choice(query_dim, key_dim, dot)
        kw = {"attn_dim": attn_dim} if self.choice == "additive" else {}
        if init != "default":
            kw["init"] = init
        self.inner = build_attention(self.choice, query_dim, key_dim, value_dim, **kw)

    def extra_repr(self) -> str:
        return f"choice={self.choice}"

    def prepare(self, keys, mask=None, values=None) -> Prepared:
        return self.inner.prepare(keys, mask, values)

    def _attend(self, query, prepared):
        return self.inner._attend(query, prepared)


@register("gated_mixed")
class GatedMixedAttention(AdditiveAttention):
    """score = g * scaled_dot(q, W k) + (1 - g) * additive(q, k), g = sigmoid(w^T q + b) per
    query (per step). The gate is summed on the device at every call (no host sync);
    `pop_gate()` returns its mean over every query since the last pop, for logging."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'gated_mixed': (
            'g·scaled_dot + (1-g)·additive, g = sigmoid(w^T q + b) per step',
            "let the model choose; the gate's mean over all decoding steps (the last layer's in the "
            'Transformer) is logged as `val/attn_gate`'),
    }

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        attn_dim: Annotated[int, at_least(1)] = 512,
        init: str = "default",
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim, attn_dim, init)
        self.w_dot = nn.Linear(key_dim, query_dim, bias=False)
        self.gate = nn.Linear(query_dim, 1)
        self._gate_sum: torch.Tensor | None = None  # () on the input's device
        self._gate_count = 0

    def _prepare_keys(self, keys: torch.Tensor) -> torch.Tensor:
        # Both key projections, concatenated so Prepared.map (beam reordering) moves them together.
        # float32, as additive's own keys (AdditiveAttention._prepare_keys says why).
        return torch.cat([super()._prepare_keys(keys), self.w_dot(keys).float()], dim=-1)  # (B, N, A + Dq)

    def _scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        add_keys, dot_keys = keys.split([self.v.in_features, self.query_dim], dim=-1)
        additive = super()._scores(query, add_keys)  # (B, T, N)
        dot = query @ dot_keys.transpose(1, 2) / math.sqrt(self.query_dim)  # (B, T, N)
        g = torch.sigmoid(self.gate(query))  # (B, T, 1)
        gate_sum = g.detach().float().sum()
        self._gate_sum = gate_sum if self._gate_sum is None else self._gate_sum + gate_sum
        self._gate_count += g.numel()
        return g * dot + (1 - g) * additive

    def pop_statistics(self) -> dict[str, float]:
        gate = self.pop_gate()
        return {} if gate is None else {"attn_gate": gate}

    def pop_gate(self) -> float | None:
        """Mean gate over every query (every step, every row) since the last pop, then reset;
        None when nothing ran. One host sync per call: call it once per batch, not per step."""
        if not self._gate_count:
            return None
        mean = float(self._gate_sum / self._gate_count)
        self._gate_sum, self._gate_count = None, 0
        return mean
