"""Decoders behind one step interface (prepare / init_state / step / reorder / forward), so
greedy decoding, batched beam search and every attention mode work with each of them."""

from __future__ import annotations

from torch import nn

from ..registry import Registry
from .lstm import LSTMDecoder
from .transformer import TransformerDecoder

DECODERS: Registry[type[nn.Module]] = Registry("decoder")
DECODERS.add("lstm", LSTMDecoder)
DECODERS.add("transformer", TransformerDecoder)


def build_decoder(cfg: dict, vocab_size: int, feature_dim: int, attention: dict,
                  global_first: bool = False) -> nn.Module:
    """Decoder from its config dict (`name` picks the class); unknown names list valid ones.
    global_first: the features' first row is a global vector (the encoder says: encoder.global_first)."""
    cfg = dict(cfg)
    return DECODERS[cfg.pop("name")](vocab_size, feature_dim, attention, global_first=global_first, **cfg)


__all__ = ["DECODERS", "LSTMDecoder", "TransformerDecoder", "build_decoder"]
