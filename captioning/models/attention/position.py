"""Positions of the attended features: cell coordinates on the 2-D grid (used by local
attention and the relative position bias), or region boxes' centres; and the 2-D relative
position bias for the dot family, defined on both."""

from __future__ import annotations

import math

import torch
from torch import nn


def grid_side(cells: int, needs: str | None = None) -> int | None:
    """The side S of `cells` = S x S positions, row-major (ResNet and ViT features): the one
    home of the square-grid rule. Not square: None, or with `needs` (who needs a grid) a
    ValueError saying so."""
    side = math.isqrt(cells)
    if side * side == cells:
        return side
    if needs is not None:
        raise ValueError(f"{needs} needs a square grid of cells, got {cells} positions")
    return None


def grid_coords(n: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 2) row/col of each position, row-major, and (2,) the largest row/col index.
    A square N is a G x G grid (ResNet features); any other N is one row (Luong's 1-D case)."""
    cols = grid_side(n) or n
    idx = torch.arange(n, device=device)
    coords = torch.stack([idx // cols, idx % cols], dim=-1).float()
    return coords, coords.max(0).values


class RelativePositionBias2d(nn.Module):
    """bias(q, n) = table[pos_n - r(q)]: a learned table over 2-D offsets (-M..M per axis),
    read by bilinear interpolation at the offset of each cell from a reference point r(q)
    predicted from the query. In cross-attention a word has no grid position of its own, so
    the offsets are taken from where the query says it is looking; interpolation keeps r(q)
    and the table differentiable.

    Over regions (precomputed box features) a position is the box's centre in [0, 1]; r(q) is
    then a point of the image and the table's -M..M spans offsets of -1..1 image widths and
    heights (every offset between two points of the image)."""

    def __init__(self, query_dim: int, max_offset: int = 6) -> None:
        super().__init__()
        self.max_offset = max_offset
        self.ref = nn.Linear(query_dim, 2)
        # Small random table: a zero one would give the reference predictor no gradient.
        self.table = nn.Parameter(torch.randn(1, 1, 2 * max_offset + 1, 2 * max_offset + 1) * 0.02)

    def forward(self, query: torch.Tensor, n: int, positions: torch.Tensor | None = None) -> torch.Tensor:
        """query (B, T, Dq), positions (B, N, 2) box centres or None (a grid of n cells)
        -> bias (B, T, N)."""
        if positions is None:
            coords, side = grid_coords(n, query.device)  # (N, 2), (2,)
            ref = side * torch.sigmoid(self.ref(query))  # (B, T, 2)
            offset = (coords - ref.unsqueeze(2)) / self.max_offset  # (B, T, N, 2) in [-1, 1]
        else:
            ref = torch.sigmoid(self.ref(query))  # (B, T, 2) a point of the image
            offset = positions.to(ref.dtype).unsqueeze(1) - ref.unsqueeze(2)  # (B, T, N, 2) in [-1, 1]
        b, t = query.shape[:2]
        grid = offset.flip(-1).reshape(1, b * t, n, 2)  # grid_sample wants (x=col, y=row)
        bias = nn.functional.grid_sample(
            self.table, grid, mode="bilinear", padding_mode="border", align_corners=True
        )  # (1, 1, B*T, N)
        return bias.view(b, t, n)
