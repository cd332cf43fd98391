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


def build_decoder(cfg: dict, vocab_size: int, feature_dim: int, attention: dict) -> nn.Module:
    """Decoder from its config dict (`name` picks the class); unknown names list valid ones."""
    cfg = dict(cfg)
    return DECODERS[cfg.pop("name")](vocab_size, feature_dim, attention, **cfg)


__all__ = ["DECODERS", "LSTMDecoder", "TransformerDecoder", "build_decoder"]
