"""Greedy decoding and sampling with the decoder API only (prepare / init_state / step /
reorder), and the token rules every decoder shares (n-gram blocking, banned ids)."""

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
    block_ngram: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """features (B, N, D) -> tokens (B, L) without <bos> (padded with eos), weights (B, L, N).
    `block_ngram` = n forbids repeating any n-gram within a caption (as beam search does)."""
    prepared = decoder.prepare(features, mask)
    state = decoder.init_state(prepared, features)
    batch = features.shape[0]
    tokens = torch.full((batch,), bos, dtype=torch.long, device=features.device)
    done = torch.zeros(batch, dtype=torch.bool, device=features.device)
    out, weights = [], []
    for _ in range(max_len):
        logits, state, w = decoder.step(tokens, state)
        if block_ngram and out:
            seqs = torch.stack(out, 1)  # (B, t) the words so far
            logits = logits.masked_fill(blocked_ngrams(seqs, block_ngram, logits.shape[-1]), float("-inf"))
        # argmax on float32: a CPU's bf16 argmax converts every element and takes twice as long
        tokens = logits.float().argmax(-1).masked_fill(done, eos)  # (B,)
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


def blocked_ngrams(seqs: torch.Tensor, n: int, vocab: int) -> torch.Tensor:
    """(R, t) sequences -> (R, V) bool: tokens that would repeat an n-gram already in the row."""
    rows, t = seqs.shape
    blocked = torch.zeros(rows, vocab, dtype=torch.bool, device=seqs.device)
    if n < 1 or t < n:
        return blocked
    prefix = seqs[:, t - n + 1 :] if n > 1 else seqs[:, :0]  # (R, n-1) the n-gram's start
    grams = seqs.unfold(1, n, 1)  # (R, t-n+1, n)
    match = (grams[:, :, : n - 1] == prefix.unsqueeze(1)).all(-1)  # (R, t-n+1)
    r, g = match.nonzero(as_tuple=True)
    blocked[r, grams[r, g, n - 1]] = True
    return blocked
