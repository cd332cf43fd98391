"""Hierarchical (two-level) attention over the grid: first over coarse regions (the S x S grid
pooled into k x k blocks), then over the cells inside each block; a cell's weight is its block's
weight times its share within the block, so weights stay per cell (entropy, grounding and
figures work unchanged). Meaningful when blocks hold several cells: on a 4x4 grid with k = 2
each block is 2x2 cells and the two levels are nearly one; on 7x7 (224 px) or 14x14 more so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
from torch import nn

from ...rules import at_least
from .base import CrossAttention, Prepared, masked_softmax, register
from .position import grid_side


@dataclass
class HierarchicalPrepared(Prepared):
    coarse: torch.Tensor | None = None  # (B, K, A) projected block keys, K = k*k
    coarse_mask: torch.Tensor | None = None  # (B, K) True = the block has a visible cell
    inside: torch.Tensor | None = None  # (B, K, N) True = a visible cell of the block


def block_membership(cells: int, blocks: int, device=None) -> torch.Tensor:
    """(k*k, N) 0/1: which cells of the S x S grid (N = S*S, row-major) each of the k x k
    blocks holds, with adaptive pooling's bins (they overlap when k does not divide S)."""
    side = grid_side(cells, "attention=hierarchical")
    if blocks > side:
        raise ValueError(f"attention.blocks={blocks} exceeds the grid side {side} ({cells} cells): "
                         f"use attention.blocks <= {side} (or a larger encoder.image_size)")
    bins = [(i * side // blocks, -(-(i + 1) * side // blocks)) for i in range(blocks)]
    member = torch.zeros(blocks, side, blocks, side, device=device)
    for i, (r0, r1) in enumerate(bins):
        for j, (c0, c1) in enumerate(bins):
            member[i, r0:r1, j, c0:c1] = 1
    return member.permute(0, 2, 1, 3).reshape(blocks * blocks, cells)


@register("hierarchical")
class HierarchicalAttention(CrossAttention):
    """Both levels score by scaled dot products of learned projections (width attn_dim), so any
    query and key widths work; block keys are the mean of their (visible) cells' features."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'hierarchical': (
            'softmax over k x k pooled blocks (`attention.blocks`, 2) x softmax over the cells inside each '
            'block (scaled dot of projections)',
            'large grids (7x7 at 224 px and up); on the built-in 4x4 grid with k = 2 the two levels nearly '
            'coincide, and k > the grid side is refused'),
    }

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        attn_dim: Annotated[int, at_least(1)] = 512,
        blocks: Annotated[int, at_least(1)] = 2,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        if blocks < 1:
            raise ValueError(f"attention.blocks must be >= 1, got {blocks}")
        self.blocks, self.scale = blocks, attn_dim**-0.5
        self.q_coarse = nn.Linear(query_dim, attn_dim, bias=False)
        self.k_coarse = nn.Linear(key_dim, attn_dim)
        self.q_fine = nn.Linear(query_dim, attn_dim, bias=False)
        self.k_fine = nn.Linear(key_dim, attn_dim)

    def extra_repr(self) -> str:
        return f"blocks={self.blocks}"

    def prepare(self, keys, mask=None, values=None) -> HierarchicalPrepared:
        values = keys if values is None else values
        member = block_membership(keys.shape[1], self.blocks, keys.device).to(keys.dtype)  # (K, N)
        # (B, K, N): the block's cells that are visible
        visible = member.expand(keys.shape[0], -1, -1) if mask is None else member * mask[:, None, :]
        counts = visible.sum(-1)  # (B, K)
        pooled = visible @ keys / counts.clamp_min(1).unsqueeze(-1)  # (B, K, Dk)
        return HierarchicalPrepared(self.k_fine(keys), values, mask, coarse=self.k_coarse(pooled),
                                    coarse_mask=counts > 0, inside=visible > 0)

    def _weights(self, query: torch.Tensor, prepared: HierarchicalPrepared) -> torch.Tensor:
        """query (B, T, Dq) -> per-cell weights (B, T, N): block weight x share within block."""
        keys = prepared.keys  # (B, N, A)
        coarse = masked_softmax(self.q_coarse(query) @ prepared.coarse.transpose(1, 2) * self.scale,
                                prepared.coarse_mask)  # (B, T, K)
        fine = self.q_fine(query) @ keys.transpose(1, 2) * self.scale  # (B, T, N)
        inside = prepared.inside.unsqueeze(1)  # (B, 1, K, N)
        # Softmax within each block (cells outside it at -inf): (B, T, K, N).
        share = fine.unsqueeze(2).masked_fill(~inside, float("-inf")).softmax(-1).nan_to_num(0.0)
        return (coarse.unsqueeze(-1) * share).sum(2)  # (B, T, N)
