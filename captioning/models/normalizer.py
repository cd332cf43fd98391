"""The feature normaliser: fitted once on training features, applied inside the model to raw
encoder features, per batch (no normalised copy of a dataset is ever stored)."""

from __future__ import annotations

import torch
from torch import nn

NORMALIZE_METHODS = ("pca_whiten", "standard")


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

    def set(self, mean: torch.Tensor, transform: torch.Tensor) -> FeatureNormalizer:
        """Load fitted statistics (from `fit_normalizer`)."""
        self.mean.copy_(mean)
        self.transform.copy_(transform)
        return self

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """raw features (B, N, in_dim), any float dtype -> (B, N, out_dim) float32."""
        out = (features.float() - self.mean) @ self.transform
        return torch.zeros_like(out) if self.blind else out


def fit_normalizer(
    features: torch.Tensor, method: str, dim: int | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fit on training feature rows (M, C) -> (mean (C,), transform (C, D)).

    eps is relative to the mean eigenvalue (mean variance for `standard`): it damps the scaling
    of near-empty directions. Every setting comes from the `encoder` config (its schema,
    captioning/schema/model.py: Normalised, is their one home: no defaults here).
    """
    if method not in NORMALIZE_METHODS:
        raise ValueError(f"encoder.normalize must be one of {', '.join(NORMALIZE_METHODS)}, got '{method}'")
    x = features.to(torch.float64, copy=True)  # our own copy: centred in place (no second copy)
    mean = x.mean(0)
    x.sub_(mean)
    if method == "standard":
        if dim is not None and dim != x.shape[1]:
            raise ValueError("encoder.normalize=standard keeps the width; use pca_whiten for encoder.pca_dim")
        # Damped like the whitening below: a channel (nearly) constant on the training split
        # (a dead ReLU) must not turn a small deviation on a test image into 1e6 (inf in fp16).
        var = x.var(0)
        scale = 1.0 / torch.sqrt(var + eps * var.mean() + 1e-12)
        return mean.float(), torch.diag(scale).float()
    cov = x.T @ x / (x.shape[0] - 1)
    evals, evecs = torch.linalg.eigh(cov)  # ascending
    evals, evecs = evals.flip(0).clamp_min(0), evecs.flip(1)
    dim = dim or x.shape[1]
    damp = eps * evals.mean()
    transform = evecs[:, :dim] / torch.sqrt(evals[:dim] + damp + 1e-12)
    return mean.float(), transform.float()
