"""Positions on the 2-D feature grid: cell coordinates (used by local attention and the
relative position bias) and the 2-D relative position bias for the dot family."""

from __future__ import annotations

import math

import torch
from torch import nn


def grid_coords(n: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 2) row/col of each position, row-major, and (2,) the largest row/col index.
    A square N is a G x G grid (ResNet features); any other N is one row (Luong's 1-D case)."""
    g = math.isqrt(n)
    cols = g if g * g == n else n
    idx = torch.arange(n, device=device)
    coords = torch.stack([idx // cols, idx % cols], dim=-1).float()
    return coords, coords.max(0).values


class RelativePositionBias2d(nn.Module):
    """bias(q, n) = table[pos_n - r(q)]: a learned table over 2-D offsets (-M..M per axis),
    read by bilinear interpolation at the offset of each cell from a reference point r(q)
    predicted from the query. In cross-attention a word has no grid position of its own, so
    the offsets are taken from where the query says it is looking; interpolation keeps r(q)
    and the table differentiable."""

    def __init__(self, query_dim: int, max_offset: int = 6) -> None:
        super().__init__()
        self.max_offset = max_offset
        self.ref = nn.Linear(query_dim, 2)
        # Small random table: a zero one would give the reference predictor no gradient.
        self.table = nn.Parameter(torch.randn(1, 1, 2 * max_offset + 1, 2 * max_offset + 1) * 0.02)

    def forward(self, query: torch.Tensor, n: int) -> torch.Tensor:
        """query (B, T, Dq) -> bias (B, T, N)."""
        coords, side = grid_coords(n, query.device)  # (N, 2), (2,)
        ref = side * torch.sigmoid(self.ref(query))  # (B, T, 2)
        offset = (coords - ref.unsqueeze(2)) / self.max_offset  # (B, T, N, 2) in [-1, 1]
        b, t = query.shape[:2]
        grid = offset.flip(-1).reshape(1, b * t, n, 2)  # grid_sample wants (x=col, y=row)
        bias = nn.functional.grid_sample(
            self.table, grid, mode="bilinear", padding_mode="border", align_corners=True
        )  # (1, 1, B*T, N)
        return bias.view(b, t, n)
