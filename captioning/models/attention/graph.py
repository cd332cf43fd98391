"""Graph attention over the grid (GAT, Velickovic et al. 2018), then a base cross-attention mode.

Once per image, in `prepare`: every cell gathers its neighbours' features with multi-head
attention restricted to a graph (8-neighbourhood on the grid, or the k nearest cells in feature
space), and the gathered message is added back to its key (a residual, projected to the key
width). The base mode then scores the refined keys; values stay the cells' own, so the context
is still a mixture of cells and a weight still means "this cell"."""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from torch import nn

from ...rules import at_least
from .base import CrossAttention, Prepared, build_attention, register
from .position import grid_side

ADJACENCY = ("grid8", "knn")


def grid_neighbours(cells: int, device=None) -> torch.Tensor:
    """(N, N) bool: cell i and j are within one step (8-neighbourhood, self included) on the
    S x S grid (row-major)."""
    side = grid_side(cells, "attention.adjacency=grid8 (else attention.adjacency=knn)")
    rc = torch.stack(torch.meshgrid(torch.arange(side, device=device), torch.arange(side, device=device),
                                    indexing="ij"), -1).reshape(cells, 2)  # (N, 2) row, column
    return (rc[:, None, :] - rc[None, :, :]).abs().amax(-1) <= 1


def knn_neighbours(keys: torch.Tensor, k: int, mask: torch.Tensor | None) -> torch.Tensor:
    """keys (B, N, D) -> (B, N, N) bool: each cell's k most similar visible cells (cosine,
    itself included)."""
    unit = F.normalize(keys.float(), dim=-1)
    sim = unit @ unit.transpose(1, 2)  # (B, N, N); itself 1, the most similar
    if mask is not None:
        sim = sim.masked_fill(~mask[:, None, :], float("-inf"))
    top = sim.topk(min(k, keys.shape[1]), dim=-1).indices  # (B, N, k)
    edges = torch.zeros_like(sim, dtype=torch.bool).scatter_(-1, top, True)
    return edges if mask is None else edges & mask[:, None, :]  # fewer than k visible: fewer edges


@register("graph")
class GraphAttention(CrossAttention):
    """GAT layer (`heads` heads of width `graph_dim`, LeakyReLU 0.2 scores, ELU) on the keys,
    residual back to the key width, then `base` (default additive) with `base_args`."""

    # docs/model.md's table of modes (maint/make_docs.py): the score, when to use it
    table = {
        'graph': (
            'a GAT layer over the cells once per image (`attention.adjacency`: `grid8` neighbours or `knn` '
            'in feature space; 4 heads of 64) added to the keys, then `attention.base` (`additive`)',
            'relations between neighbouring regions matter (an object next to another); keys only, values '
            "stay each cell's own"),
    }

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int | None = None,
        base: str = "additive",
        base_args: dict[str, Any] = MappingProxyType({"attn_dim": 512}),  # the base mode's settings
        heads: Annotated[int, at_least(1)] = 4,
        graph_dim: Annotated[int, at_least(1)] = 64,  # per head
        adjacency: str = "grid8",  # or knn
        knn: Annotated[int, at_least(1)] = 8,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim)
        if adjacency not in ADJACENCY:
            raise ValueError(f"attention.adjacency must be one of {list(ADJACENCY)}, got '{adjacency}'")
        if base == "graph":
            raise ValueError("attention.base=graph: the graph layer needs another mode as its base")
        self.heads, self.graph_dim, self.adjacency, self.knn = heads, graph_dim, adjacency, knn
        self.inner = build_attention(base, query_dim, key_dim, value_dim, **(base_args or {}))
        self.weights_make_context = self.inner.weights_make_context
        self.w = nn.Linear(key_dim, heads * graph_dim, bias=False)
        self.a_src = nn.Parameter(torch.randn(heads, graph_dim) * graph_dim**-0.5)
        self.a_dst = nn.Parameter(torch.randn(heads, graph_dim) * graph_dim**-0.5)
        self.out = nn.Linear(heads * graph_dim, key_dim)

    def extra_repr(self) -> str:
        return f"adjacency={self.adjacency}, heads={self.heads}, base={type(self.inner).__name__}"

    def refine(self, keys: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """keys (B, N, Dk) -> keys + out(ELU(GAT messages)) (B, N, Dk)."""
        b, n, _ = keys.shape
        h = self.w(keys).view(b, n, self.heads, self.graph_dim)  # (B, N, H, F)
        src = (h * self.a_src).sum(-1).transpose(1, 2)  # (B, H, N): the receiving cell's part
        dst = (h * self.a_dst).sum(-1).transpose(1, 2)  # (B, H, N): the sending cell's part
        scores = F.leaky_relu(src.unsqueeze(-1) + dst.unsqueeze(-2), 0.2)  # (B, H, N, N)
        if self.adjacency == "grid8":
            edges = grid_neighbours(n, keys.device).expand(b, n, n)
            if mask is not None:
                edges = edges & mask[:, None, :]
        else:
            edges = knn_neighbours(keys, self.knn, mask)
        scores = scores.masked_fill(~edges.unsqueeze(1), float("-inf"))
        alpha = scores.softmax(-1).nan_to_num(0.0)  # (B, H, N, N)
        messages = alpha.to(h.dtype) @ h.transpose(1, 2)  # (B, H, N, F)
        return keys + self.out(F.elu(messages.transpose(1, 2).reshape(b, n, -1)))

    def prepare(self, keys, mask=None, values=None) -> Prepared:
        values = keys if values is None else values
        return self.inner.prepare(self.refine(keys, mask), mask, values)

    def _attend(self, query, prepared):
        return self.inner._attend(query, prepared)
