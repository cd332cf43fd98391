"""Decoding with the decoder API only (prepare / init_state / step / reorder)."""

from __future__ import annotations

import torch

from .beam import beam_search


@torch.no_grad()
def greedy_decode(
    decoder,
    features: torch.Tensor,
    bos: int,
    eos: int,
    max_len: int = 30,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """features (B, N, D) -> tokens (B, L) without <bos> (padded with eos), weights (B, L, N)."""
    prepared = decoder.prepare(features, mask)
    state = decoder.init_state(prepared, features)
    batch = features.shape[0]
    tokens = torch.full((batch,), bos, dtype=torch.long, device=features.device)
    done = torch.zeros(batch, dtype=torch.bool, device=features.device)
    out, weights = [], []
    for _ in range(max_len):
        logits, state, w = decoder.step(tokens, state)
        tokens = logits.argmax(-1).masked_fill(done, eos)  # (B,)
        out.append(tokens)
        weights.append(w)
        done |= tokens == eos
        if bool(done.all()):
            break
    return torch.stack(out, 1), torch.stack(weights, 1)


@torch.no_grad()
def decode_batch(
    decoder, features: torch.Tensor, bos: int, eos: int, pad: int, cfg: dict
) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Decode with the `decode` config (beam_size 1 = greedy): token ids (without <bos>, up to and
    including <eos>) and each caption's attention weights (len, N), one per image."""
    if cfg.get("beam_size", 1) == 1:
        tokens, weights = greedy_decode(decoder, features, bos, eos, cfg.get("max_len", 30))
        ids, out = [], []
        for row, w in zip(tokens.tolist(), weights):
            n = row.index(eos) + 1 if eos in row else len(row)
            ids.append(row[:n])
            out.append(w[:n])
        return ids, out
    hyps = beam_search(
        decoder, features, bos, eos, cfg["beam_size"], cfg.get("max_len", 30),
        alpha=cfg.get("alpha", 0.0), block_ngram=cfg.get("block_ngram", 0), banned=(pad, bos),
    )
    return [h[0].tokens for h in hyps], [h[0].weights for h in hyps]


def decode_settings(base: dict, overrides: dict | None = None) -> dict:
    """A run's `decode` config with the non-None entries of `overrides` applied."""
    return {**base, **{k: v for k, v in (overrides or {}).items() if v is not None}}
