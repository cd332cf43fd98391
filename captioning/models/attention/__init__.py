"""Cross-attention modules behind one interface; `build_attention(name, Dq, Dk, Dv, **cfg)`.

A mode is one file here: every module of this package is imported below, so its `@register`
puts it in ATTENTIONS; its settings (`attention.<key>`) come from its constructor's keywords
(captioning/schema/attention.py), and `attention=<name>` from the registry."""

import importlib
import pkgutil

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

for _module in pkgutil.iter_modules(__path__):  # each file registers its modes
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "ATTENTION_STATS", "ATTENTIONS", "CrossAttention", "Prepared", "attention_stats",
    "attention_step_stats", "build_attention",
    "cross_attention_modules", "doubly_stochastic_penalty", "masked_softmax", "own_init_stream",
    "placed", "sentinel_weight",
]
