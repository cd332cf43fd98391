"""Cross-attention modules behind one interface; `build_attention(name, Dq, Dk, Dv, **cfg)`."""

from . import additive, dot, linear, local, mixed, multihead  # noqa: F401  (registers the modules)
from .base import (
    ATTENTION_STATS,
    ATTENTIONS,
    CrossAttention,
    Prepared,
    attention_stats,
    attention_step_stats,
    build_attention,
    cross_attention_modules,
    doubly_stochastic_penalty,
    masked_softmax,
)

__all__ = [
    "ATTENTION_STATS", "ATTENTIONS", "CrossAttention", "Prepared", "attention_stats",
    "attention_step_stats", "build_attention",
    "cross_attention_modules", "doubly_stochastic_penalty", "masked_softmax",
]
