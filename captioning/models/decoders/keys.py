"""What a decoder attends over when the encoder also gives a global vector."""

from __future__ import annotations

import torch


def keys_only(
    features: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None, global_first: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """features (B, 1 + N, D) whose first row is a global vector (ViT's class token), with their
    mask (B, 1 + N) and positions (B, 1 + N, 2) -> the N keys' rows; unchanged without one.
    The global vector summarises the image, it is not a place in it: attention weights, maps and
    grounding are over the N keys."""
    if not global_first:
        return features, mask, positions
    return (features[:, 1:], None if mask is None else mask[:, 1:],
            None if positions is None else positions[:, 1:])
