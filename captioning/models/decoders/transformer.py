"""Pre-norm Transformer decoder: causal self-attention (with a key/value cache for incremental
decoding), cross-attention from the attention registry over the image grid, MLP."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import nn

from ...rules import at_least, between
from ..attention import Prepared, build_attention, own_init_stream, placed
from .keys import keys_only


@dataclass
class TransformerState:
    prepared: list[Prepared]  # per layer: cross-attention keys/values, once per image
    keys: list[torch.Tensor]  # per layer: (B, H, t, dh) self-attention cache
    values: list[torch.Tensor]
    tokens: torch.Tensor  # (B, t) tokens so far (the uncached path re-runs them)

    def map(self, fn, images=None) -> TransformerState:
        """fn on every per-row tensor; the prepared keys get `images` (default: fn too)."""
        images = fn if images is None else images
        return TransformerState(
            [p.map(images) for p in self.prepared], [fn(k) for k in self.keys],
            [fn(v) for v in self.values], fn(self.tokens),
        )


class SelfAttention(nn.Module):
    """Causal multi-head scaled dot-product attention over the caption so far."""

    def __init__(self, d_model: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.h, self.dh = num_heads, d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None):
        """x (B, T, D) -> (B, T, D), (k, v) each (B, H, T_total, dh). With a cache, x holds only
        the new positions and attends to everything cached before them."""
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, self.h, self.dh).transpose(1, 2) for z in self.qkv(x).chunk(3, -1))
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        # One new query attends to all cached keys: no mask. T queries at once: causal.
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=cache is None and t > 1, dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, T, dh)
        return self.out(y.transpose(1, 2).reshape(b, t, -1)), (k, v)


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, ff_dim: int, dropout: float,
                 key_dim: int, attention: dict, paired_init: bool = True) -> None:
        super().__init__()
        attention = dict(attention)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.self_attn = SelfAttention(d_model, num_heads, dropout)
        # Values are projected to d_model once per image; keys stay at their own width so the
        # attention module itself handles Dq != Dk.
        self.value_proj = nn.Linear(key_dim, d_model)
        with own_init_stream(paired_init):  # the layers after it start alike in every mode
            self.cross = build_attention(attention.pop("name"), d_model, key_dim, d_model, **attention)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, ff_dim), nn.GELU(), nn.Linear(ff_dim, d_model), nn.Dropout(dropout)
        )
        self.drop = nn.Dropout(dropout)

    def prepare(self, features: torch.Tensor, mask: torch.Tensor | None,
                positions: torch.Tensor | None = None) -> Prepared:
        return placed(self.cross.prepare(features, mask, values=self.value_proj(features)), positions)

    def forward(self, x, prepared, cache=None):
        """x (B, T, D) -> x, new (k, v) cache, cross-attention weights (B, T, N)."""
        y, kv = self.self_attn(self.norm1(x), cache)
        x = x + self.drop(y)
        y, weights = self.cross(self.norm2(x), prepared)  # (B, T, D), (B, T, N)
        x = x + self.drop(y)
        return x + self.mlp(self.norm3(x)), kv, weights


class TransformerDecoder(nn.Module):
    """Same decoding API as the LSTM (prepare / init_state / step / reorder / forward).
    Returned attention weights are the last layer's cross-attention."""

    def __init__(
        self,
        vocab_size: int,
        feature_dim: int,
        attention: dict,
        d_model: Annotated[int, at_least(1)] = 512,
        num_layers: Annotated[int, at_least(1)] = 2,
        num_heads: Annotated[int, at_least(1)] = 8,
        ff_dim: Annotated[int, at_least(1)] = 1024,
        dropout: Annotated[float, between(0, 1, high_open=True)] = 0.0,
        positions: str = "learned",  # or sinusoidal
        max_len: Annotated[int, at_least(1)] = 64,
        tie_embeddings: bool = True,
        project_features: bool = False,
        use_cache: bool = True,  # false re-runs the whole prefix at every step (reference path)
        length_buckets: Annotated[int, at_least(1)] = 3,  # training: <= 3 caption length groups
        prepare_once: bool = True,  # false: the naive baseline (keys re-projected every call)
        paired_init: bool = True,  # as the LSTM's: shared layers start alike in every mode
        global_first: bool = False,  # features' first row is a global vector (set from the encoder)
    ) -> None:
        super().__init__()
        self.global_first = global_first
        if d_model % num_heads:
            raise ValueError(f"decoder.d_model={d_model} must be divisible by num_heads={num_heads}")
        self.d_model, self.max_len, self.use_cache = d_model, max_len, use_cache
        self.length_buckets = length_buckets
        # False = naive baseline: cross-attention keys/values projected again at every call.
        self.prepare_once = prepare_once
        self.embed = nn.Embedding(vocab_size, d_model)
        # Scaled by sqrt(d) on the way in and tied to the head: unit-variance inputs, O(1) logits.
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        if positions == "learned":
            self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        elif positions == "sinusoidal":
            pos = torch.arange(max_len).unsqueeze(1)
            freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            table = torch.zeros(max_len, d_model)
            table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
            self.register_buffer("pos", table, persistent=False)
        else:
            raise ValueError(f"decoder.positions must be 'learned' or 'sinusoidal', got '{positions}'")
        # project_features=true maps the grid to d_model first (matched widths everywhere).
        self.feature_proj = nn.Linear(feature_dim, d_model) if project_features else None
        key_dim = d_model if project_features else feature_dim
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, ff_dim, dropout, key_dim, attention, paired_init)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        if tie_embeddings:
            self.head.weight = self.embed.weight
        self.drop = nn.Dropout(dropout)

    @property
    def attention(self) -> nn.Module:
        """The last layer's cross-attention (what diagnostics report)."""
        return self.layers[-1].cross

    def _embed(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        t = tokens.shape[1]
        if start + t > self.max_len:
            raise ValueError(f"caption of {start + t} tokens exceeds decoder.max_len={self.max_len}")
        return self.drop(self.embed(tokens) * math.sqrt(self.d_model) + self.pos[start : start + t])

    def prepare(self, features: torch.Tensor, mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> list[Prepared]:
        """Per-layer cross-attention keys/values, once per image; mask (B, N) and positions
        (B, N, 2) for region features. A global vector (global_first: the first row) is no key,
        and this decoder has no initial state to start from it: it is left out."""
        features, mask, positions = keys_only(features, mask, positions, self.global_first)
        if not self.prepare_once:  # naive baseline: raw features, prepared in every _run
            return [Prepared(features, features, mask, positions) for _ in self.layers]
        if self.feature_proj is not None:
            features = self.feature_proj(features)
        return [layer.prepare(features, mask, positions) for layer in self.layers]

    def _layer_keys(self, i: int, prepared: Prepared) -> Prepared:
        if self.prepare_once:
            return prepared
        features = prepared.keys if self.feature_proj is None else self.feature_proj(prepared.keys)
        return self.layers[i].prepare(features, prepared.mask, prepared.positions)

    def init_state(self, prepared: list[Prepared], features: torch.Tensor) -> TransformerState:
        b = features.shape[0]
        empty = features.new_zeros(b, self.layers[0].self_attn.h, 0, self.layers[0].self_attn.dh)
        n = len(self.layers)
        tokens = torch.zeros(b, 0, dtype=torch.long, device=features.device)
        return TransformerState(prepared, [empty] * n, [empty] * n, tokens)

    def _run(self, tokens, prepared, start=0, caches=None):
        """tokens (B, T) at positions start.. -> hidden (B, T, D), caches, last weights."""
        x = self._embed(tokens, start)
        new_caches = []
        for i, layer in enumerate(self.layers):
            keys = self._layer_keys(i, prepared[i])
            x, kv, weights = layer(x, keys, None if caches is None else caches[i])
            new_caches.append(kv)
        return self.norm(x), new_caches, weights

    def step(self, tokens: torch.Tensor, state: TransformerState):
        """tokens (B,) -> logits (B, V), state, weights (B, N). With use_cache the step costs
        O(current length); without it the whole prefix is re-run (the reference path)."""
        history = torch.cat([state.tokens, tokens.unsqueeze(1)], 1)  # (B, t+1)
        if self.use_cache:
            start = state.tokens.shape[1]
            caches = list(zip(state.keys, state.values))
            x, new, weights = self._run(tokens.unsqueeze(1), state.prepared, start, caches)
        else:
            x, new, weights = self._run(history, state.prepared)
        state = TransformerState(state.prepared, [k for k, _ in new], [v for _, v in new], history)
        return self.head(x[:, -1]), state, weights[:, -1]

    def reorder(
        self, state: TransformerState, index: torch.Tensor,
        images: torch.Tensor | slice | None = None,
    ) -> TransformerState:
        """Select rows (cache, tokens) by `index`; prepared keys follow `index` unless `images`
        selects them per image (see LSTMDecoder.reorder)."""
        pick = lambda t: t.index_select(0, index)  # noqa: E731
        return state.map(pick, None if images is None else lambda t: t[images])

    def forward(self, features, tokens, mask=None, lengths=None, image_index=None, sample_prob=0.0,
                positions=None):
        """Teacher forcing: features (I, N, Df), tokens (B, T) -> logits (B, T, V), weights
        (B, T, N). `image_index` (B,) maps captions to images (default: caption i <-> image i).

        `sample_prob` > 0 is scheduled sampling, the two-pass way (all positions are computed at
        once, so the model's own words must exist before the pass that learns): a teacher-forced
        pass without gradients predicts every next word (argmax); each input word after <bos> is
        replaced by that prediction with probability sample_prob; the second pass trains on the
        mix. Cost: one extra forward pass per step.

        Causal masking makes right-padding harmless to real positions. With `lengths` (B,),
        captions are sorted into up to `length_buckets` groups of similar length, each run only
        as long as its longest caption, so padding is (mostly) not computed. Positions past a
        group's longest caption get logits 0 and weights 0 (the loss ignores them).
        """
        if sample_prob > 0:
            with torch.no_grad():
                first, _ = self.forward(features, tokens, mask, lengths, image_index,
                                        positions=positions)  # (B, T, V)
            use = torch.rand(tokens[:, 1:].shape, device=tokens.device) < sample_prob
            tokens = torch.cat([tokens[:, :1], torch.where(use, first[:, :-1].argmax(-1), tokens[:, 1:])], 1)
        prepared = self.prepare(features, mask, positions)  # (I, ...) once per image
        batch, steps = tokens.shape
        index = torch.arange(batch, device=tokens.device) if image_index is None else image_index
        if lengths is None or self.length_buckets <= 1:
            rows = [(torch.arange(batch, device=tokens.device), steps)]
        else:
            rows = length_buckets(lengths, self.length_buckets)
        logits = weights = None
        for idx, t in rows:
            # Captions share their image's prepared keys (a copy per caption, per bucket).
            prep = [p.map(lambda x: x.index_select(0, index[idx])) for p in prepared]
            x, _, w = self._run(tokens[idx, :t], prep)
            out = self.head(x)  # (b, t, V)
            if len(rows) == 1 and t == steps:
                return out, w
            if logits is None:
                logits = out.new_zeros(batch, steps, out.shape[-1])
                weights = w.new_zeros(batch, steps, w.shape[-1])
            logits[idx, :t], weights[idx, :t] = out, w
        return logits, weights


def length_buckets(lengths: torch.Tensor, k: int) -> list[tuple[torch.Tensor, int]]:
    """Split rows into <= k groups of similar length minimising the computed positions
    sum(group size x group max length) plus a fixed cost per group: exact DP over the
    distinct lengths.

    lengths (B,) -> [(row indices, max length)], longest group first.
    """
    order = lengths.argsort(descending=True)
    # Host copy on purpose (one per training step): the grouping is a Python DP over lengths.
    sorted_len = lengths[order].tolist()
    # Candidate cut points: where the length changes (a cut inside a run of equal lengths
    # never helps). starts[j] = first sorted row of the j-th distinct length.
    starts = [0] + [i for i in range(1, len(sorted_len)) if sorted_len[i] != sorted_len[i - 1]]
    d, n = len(starts), len(sorted_len)
    bound = starts + [n]
    inf = float("inf")
    overhead = 0.05 * n * sorted_len[0]  # a group's fixed cost: a tiny group is not worth a call
    # best[g][j]: min cost of rows from bound[j] to the end using at most g groups
    best = [[inf] * (d + 1) for _ in range(k + 1)]
    cut = [[d] * (d + 1) for _ in range(k + 1)]
    for g in range(k + 1):
        best[g][d] = 0
    for g in range(1, k + 1):
        for j in range(d - 1, -1, -1):
            for e in range(j + 1, d + 1):  # group = distinct lengths j..e-1
                cost = (bound[e] - bound[j]) * sorted_len[bound[j]] + overhead + best[g - 1][e]
                if cost < best[g][j]:
                    best[g][j], cut[g][j] = cost, e
    groups, j, g = [], 0, k
    while j < d:
        e = cut[g][j]
        groups.append((order[bound[j] : bound[e]], max(1, sorted_len[bound[j]])))
        j, g = e, g - 1
    return groups
