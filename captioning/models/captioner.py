"""The trainable model: feature normaliser (fitted on the training split) + decoder."""

from __future__ import annotations

import torch
from torch import nn

from .decoding import greedy_decode
from .lstm import LSTMDecoder
from .transformer import TransformerDecoder

DECODERS = {"lstm": LSTMDecoder, "transformer": TransformerDecoder}


def build_decoder(cfg: dict, vocab_size: int, feature_dim: int, attention: dict) -> nn.Module:
    """Decoder from its config dict (`name` picks the class); unknown names list valid ones."""
    cfg = dict(cfg)
    name = cfg.pop("name")
    if name not in DECODERS:
        raise ValueError(f"unknown decoder '{name}'; valid: {', '.join(sorted(DECODERS))}")
    return DECODERS[name](vocab_size, feature_dim, attention, **cfg)


class FeatureNormalizer(nn.Module):
    """(x - mean) @ transform: per-channel standardisation (transform = diag(1/std)) or PCA
    whitening (transform = U diag(1/sqrt(lambda + eps)), optionally the top `dim` components).
    `blind` zeroes the output: the control run that shows how much the image matters."""

    def __init__(self, in_dim: int, out_dim: int, blind: bool = False) -> None:
        super().__init__()
        self.blind = blind
        self.register_buffer("mean", torch.zeros(in_dim))
        self.register_buffer("transform", torch.eye(in_dim, out_dim))

    @property
    def out_dim(self) -> int:
        return self.transform.shape[1]

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """features (B, N, in_dim) -> (B, N, out_dim)."""
        out = (features.float() - self.mean) @ self.transform
        return torch.zeros_like(out) if self.blind else out


def fit_normalizer(
    features: torch.Tensor, method: str = "pca_whiten", dim: int | None = None, eps: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit on training features (M, C) -> (mean (C,), transform (C, D)).

    eps is relative to the mean eigenvalue (mean variance for `standard`): it damps the scaling
    of near-empty directions.
    """
    x = features.double()
    mean = x.mean(0)
    x = x - mean
    if method == "standard":
        if dim is not None and dim != x.shape[1]:
            raise ValueError("encoder.normalize=standard keeps the width; use pca_whiten for dim")
        # Damped like the whitening below: a channel (nearly) constant on the training split
        # (a dead ReLU) must not turn a small deviation on a test image into 1e6 (inf in fp16).
        var = x.var(0)
        scale = 1.0 / torch.sqrt(var + eps * var.mean() + 1e-12)
        return mean.float(), torch.diag(scale).float()
    if method != "pca_whiten":
        raise ValueError(f"encoder.normalize must be 'standard' or 'pca_whiten', got '{method}'")
    cov = x.T @ x / (x.shape[0] - 1)
    evals, evecs = torch.linalg.eigh(cov)  # ascending
    evals, evecs = evals.flip(0).clamp_min(0), evecs.flip(1)
    dim = dim or x.shape[1]
    damp = eps * evals.mean()
    transform = evecs[:, :dim] / torch.sqrt(evals[:dim] + damp + 1e-12)
    return mean.float(), transform.float()


class Captioner(nn.Module):
    """normalizer -> decoder; `generate` decodes raw (un-normalised) encoder features."""

    def __init__(self, decoder: nn.Module, normalizer: FeatureNormalizer) -> None:
        super().__init__()
        self.decoder = decoder
        self.normalizer = normalizer

    def forward(
        self,
        features: torch.Tensor,
        tokens: torch.Tensor,
        lengths: torch.Tensor | None = None,
        image_index: torch.Tensor | None = None,
    ):
        """Normalised features (I, N, D), tokens (B, T) -> logits (B, T, V), weights (B, T, N)."""
        return self.decoder(features, tokens, lengths=lengths, image_index=image_index)

    @torch.no_grad()
    def generate(self, raw_features: torch.Tensor, bos: int, eos: int, max_len: int = 30):
        """Raw encoder features (B, N, C) -> tokens (B, L), weights (B, L, N)."""
        return greedy_decode(self.decoder, self.normalizer(raw_features), bos, eos, max_len)


def build_captioner(cfg: dict, vocab_size: int) -> Captioner:
    """The model a resolved run config describes (normaliser buffers still to be loaded)."""
    from .encoder import encoder_dim

    enc = cfg["encoder"]
    in_dim = encoder_dim(enc["name"])
    normalizer = FeatureNormalizer(in_dim, enc.get("pca_dim") or in_dim, cfg["data"].get("blind", False))
    decoder = build_decoder(cfg["decoder"], vocab_size, normalizer.out_dim, cfg["attention"])
    return Captioner(decoder, normalizer)
