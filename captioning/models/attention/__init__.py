"""Cross-attention modules behind one interface; `build_attention(name, Dq, Dk, Dv, **cfg)`."""

from . import (  # noqa: F401  (registers the modules)
    adaptive,
    additive,
    aoa,
    dot,
    graph,
    hierarchical,
    linear,
    local,
    mixed,
    multihead,
)
from .adaptive import sentinel_weight
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
    own_init_stream,
    placed,
)

__all__ = [
    "ATTENTION_STATS", "ATTENTIONS", "CrossAttention", "Prepared", "attention_stats",
    "attention_step_stats", "build_attention",
    "cross_attention_modules", "doubly_stochastic_penalty", "masked_softmax", "own_init_stream",
    "placed", "sentinel_weight",
]
