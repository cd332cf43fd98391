"""Greedy decoding with the decoder API only (prepare / init_state / step / reorder)."""

from __future__ import annotations

import torch


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
        if bool(done.all()):  # host sync on purpose: stop as soon as every caption has ended
            break
    return torch.stack(out, 1), torch.stack(weights, 1)
