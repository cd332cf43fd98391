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


@torch.no_grad()
def sample_decode(
    decoder,
    features: torch.Tensor,
    bos: int,
    eos: int,
    k: int,
    max_len: int = 30,
    banned: tuple[int, ...] = (),
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """K captions per image sampled from the model's distribution (multinomial, temperature 1):
    features (B, N, D) -> tokens (B*K, L) without <bos>, image-major (rows b*K .. b*K+K-1 are
    image b's), padded with eos after each caption's first eos. `banned` ids (pad, bos) are
    never drawn; log_probs() scores the samples under the same rule."""
    prepared = decoder.prepare(features, mask)  # once per image
    rows = torch.arange(features.shape[0], device=features.device).repeat_interleave(k)  # (B*K,)
    state = decoder.reorder(decoder.init_state(prepared, features), rows)
    tokens = torch.full(rows.shape, bos, dtype=torch.long, device=features.device)
    done = torch.zeros(rows.shape, dtype=torch.bool, device=features.device)
    out = []
    for _ in range(max_len):
        logits, state, _ = decoder.step(tokens, state)  # (B*K, V)
        probs = log_probs(logits, banned).exp()
        tokens = torch.multinomial(probs, 1).squeeze(1).masked_fill(done, eos)  # (B*K,)
        out.append(tokens)
        done |= tokens == eos
        if bool(done.all()):  # host sync on purpose: stop as soon as every caption has ended
            break
    return torch.stack(out, 1)


def log_probs(logits: torch.Tensor, banned: tuple[int, ...] = ()) -> torch.Tensor:
    """(..., V) logits -> float32 log-probabilities with the `banned` ids at -inf."""
    logits = logits.float()
    if banned:
        logits = logits.index_fill(-1, torch.tensor(banned, device=logits.device), float("-inf"))
    return logits.log_softmax(-1)
