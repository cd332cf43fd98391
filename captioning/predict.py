"""From raw features to words: the one decode path that training (validation/test), evaluation
and captioning new images share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .checkpoint import load_checkpoint
from .cpu import configure_cpu
from .data.features import resolve_device
from .data.vocab import Vocabulary
from .models.captioner import Captioner

DECODE_KEYS = ("beam_size", "max_len", "alpha", "block_ngram")


def greedy(decode: dict) -> dict:
    """The decode settings with beam search switched off: validation decodes greedily every
    epoch because it only ranks checkpoints; the test stage uses the settings as given."""
    return {**decode, "beam_size": 1}


def decode_settings(base: dict, overrides: dict | None = None) -> dict:
    """A run's `decode` config with the non-None entries of `overrides` applied."""
    merged = {**base, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    unknown = set(merged) - set(DECODE_KEYS)
    if unknown:
        raise ValueError(f"unknown decode setting(s) {sorted(unknown)}; valid: {', '.join(DECODE_KEYS)}")
    return merged


@dataclass
class Caption:
    """One image's caption: its words, and the attention behind them."""

    words: list[str]
    weights: torch.Tensor  # (len(words), N): row t is the attention when word t was generated
    steps: torch.Tensor  # (steps, N): every decoding step up to and including <eos> (diagnostics)


@torch.no_grad()
def caption_features(
    model: Captioner, vocab: Vocabulary, raw_features: torch.Tensor, decode: dict
) -> list[Caption]:
    """Raw features (B, N, C), on any device -> one Caption per image, decoded on the model's
    device with `decode` settings (the attention stays there)."""
    device = next(model.parameters()).device
    ids, weights = model.generate(raw_features.to(device), vocab.bos, vocab.eos, vocab.pad, **decode)
    return [Caption(*vocab.decode_aligned(tokens, w), w) for tokens, w in zip(ids, weights)]


@dataclass
class Predictor:
    """A checkpoint ready to caption: model (eval mode, on `device`), vocabulary, run config,
    decoding."""

    model: Captioner
    vocab: Vocabulary
    cfg: dict
    decode: dict
    device: torch.device

    @classmethod
    def load(cls, checkpoint: str | Path, decode: dict | None = None,
             device: str = "auto") -> Predictor:
        """`decode` entries that are not None override the checkpoint's own settings; `device`:
        auto (the GPU when there is one, as training), cpu, cuda or cuda:N."""
        where = resolve_device(device)  # a bad name fails before the checkpoint is read
        configure_cpu()  # decoding a trained model is full of them too
        model, vocab, cfg = load_checkpoint(checkpoint)
        return cls(model.to(where), vocab, cfg, decode_settings(cfg["decode"], decode), where)

    def __call__(self, raw_features: torch.Tensor) -> list[Caption]:
        """Captions with their attention on the CPU (figures, JSON), wherever they were decoded."""
        captions = caption_features(self.model, self.vocab, raw_features, self.decode)
        return [Caption(c.words, c.weights.cpu(), c.steps.cpu()) for c in captions]
