"""Key-side refiners (`model.refiner=<name>`): trainable modules run once per image on the
normalised features, before any cross-attention mode, in either decoder. They belong to the
model (trained, in the checkpoint), not to the frozen encoder."""

from __future__ import annotations

import torch
from torch import nn

from .registry import Registry

REFINERS: Registry = Registry("model.refiner")


@REFINERS.register("self_attention")
class SelfAttentionRefiner(nn.Module):
    """Region self-attention, like the encoders of M2 and AoANet: L pre-norm Transformer layers
    over the grid cells, so each cell's feature carries context from the others. They work in a
    bottleneck of width `dim` (features projected down, refined, projected back up and added to
    the input), so the key width the decoder sees, the factor the comparison studies, is
    unchanged, and a 2048-d grid costs 2 x 2048 x dim weights, not a 2048-d Transformer."""

    def __init__(self, feature_dim: int, *, layers: int, dim: int, heads: int,
                 dropout: float = 0.1) -> None:
        super().__init__()
        if layers < 1 or dim % heads:
            raise ValueError(f"model.refiner_layers={layers} must be >= 1 and model.refiner_dim="
                             f"{dim} divisible by model.refiner_heads={heads}")
        self.down = nn.Linear(feature_dim, dim)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout, batch_first=True, norm_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, feature_dim)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """features (B, N, D), mask (B, N) True = visible -> refined (B, N, D)."""
        x = self.down(features)  # (B, N, dim)
        pad = None if mask is None else ~mask
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=pad)
        return features + self.up(self.norm(x))


def build_refiner(model_cfg: dict, feature_dim: int) -> nn.Module | None:
    """The refiner `model.refiner` names (none: no module), sized by model.refiner_*."""
    name = model_cfg["refiner"]
    if name == "none":
        return None
    return REFINERS[name](feature_dim, layers=model_cfg["refiner_layers"], dim=model_cfg["refiner_dim"],
                          heads=model_cfg["refiner_heads"])
