"""Greedy decoding and sampling with the decoder API only (prepare / init_state / step /
reorder), and the token rules every decoding path shares (constrain: banned ids, n-gram
blocking, a minimum length; sampling_distribution: temperature, top-k, top-p)."""

from __future__ import annotations

import torch

from .cpu_speed import decoding_packed


@torch.no_grad()
@decoding_packed  # every linear's weight packed once per search, not per token
def greedy_decode(
    decoder,
    features: torch.Tensor,
    bos: int,
    eos: int,
    max_len: int = 30,
    mask: torch.Tensor | None = None,
    block_ngram: int = 0,
    banned: tuple[int, ...] = (),
    min_len: int = 0,
    positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """features (B, N, D) -> tokens (B, L) without <bos> (padded with eos), weights (B, L, N).
    The step rules (constrain) as in beam search and sampling. mask (B, N), positions (B, N, 2):
    region features (decoder.prepare)."""
    prepared = decoder.prepare(features, mask, positions)
    state = decoder.init_state(prepared, features)
    batch = features.shape[0]
    tokens = torch.full((batch,), bos, dtype=torch.long, device=features.device)
    done = torch.zeros(batch, dtype=torch.bool, device=features.device)
    out, weights = [], []
    for t in range(max_len):
        logits, state, w = decoder.step(tokens, state)
        logits = constrain(logits, out, t, eos, banned, block_ngram, min_len)
        # argmax on float32: a CPU's bf16 argmax converts every element and takes twice as long
        tokens = logits.float().argmax(-1).masked_fill(done, eos)  # (B,)
        out.append(tokens)
        weights.append(w)
        done |= tokens == eos
        if bool(done.all()):  # host sync on purpose: stop as soon as every caption has ended
            break
    return torch.stack(out, 1), torch.stack(weights, 1)


@torch.no_grad()
@decoding_packed  # every linear's weight packed once per search, not per token
def sample_decode(
    decoder,
    features: torch.Tensor,
    bos: int,
    eos: int,
    k: int,
    max_len: int = 30,
    banned: tuple[int, ...] = (),
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    block_ngram: int = 0,
    min_len: int = 0,
    positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """K captions per image sampled from the model's distribution: features (B, N, D) ->
    tokens (B*K, L) without <bos>, image-major (rows b*K .. b*K+K-1 are image b's), padded with
    eos after each caption's first eos, and their attention (B*K, L, N). Each step draws from
    softmax(logits / temperature) cut to the top_k tokens and to the smallest set holding top_p
    of the probability (0 and 1.0: no cut), after the step rules (constrain); `generator`
    seeds the draws. Temperature 1 with no cut is what self-critical training samples."""
    prepared = decoder.prepare(features, mask, positions)  # once per image
    rows = torch.arange(features.shape[0], device=features.device).repeat_interleave(k)  # (B*K,)
    state = decoder.reorder(decoder.init_state(prepared, features), rows)
    tokens = torch.full(rows.shape, bos, dtype=torch.long, device=features.device)
    done = torch.zeros(rows.shape, dtype=torch.bool, device=features.device)
    out, weights = [], []
    for t in range(max_len):
        logits, state, w = decoder.step(tokens, state)  # (B*K, V)
        logits = constrain(logits.float(), out, t, eos, banned, block_ngram, min_len)
        probs = sampling_distribution(logits, temperature, top_k, top_p)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1).masked_fill(done, eos)
        out.append(tokens)
        weights.append(w)
        done |= tokens == eos
        if bool(done.all()):  # host sync on purpose: stop as soon as every caption has ended
            break
    return torch.stack(out, 1), torch.stack(weights, 1)


def constrain(logits: torch.Tensor, so_far: list[torch.Tensor] | torch.Tensor, step: int, eos: int,
              banned: tuple[int, ...] = (), block_ngram: int = 0, min_len: int = 0) -> torch.Tensor:
    """The step rules every decoding path applies (greedy, beam, sampling), one place: `banned`
    ids are never produced; no n-gram is repeated within a caption (block_ngram = n > 0); no
    <eos> before min_len words. logits (R, V); so_far: the R rows' words so far, (R, t) or t
    tensors of (R,). -> logits with the forbidden tokens at -inf."""
    if banned:
        logits = logits.index_fill(-1, torch.tensor(banned, device=logits.device), float("-inf"))
    if block_ngram and len(so_far):
        seqs = so_far if isinstance(so_far, torch.Tensor) else torch.stack(so_far, 1)
        logits = logits.masked_fill(blocked_ngrams(seqs, block_ngram, logits.shape[-1]), float("-inf"))
    if step < min_len:
        logits = logits.index_fill(-1, torch.tensor([eos], device=logits.device), float("-inf"))
    return logits


def sampling_distribution(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                          top_p: float = 1.0) -> torch.Tensor:
    """(R, V) logits -> (R, V) float32 probabilities to draw from: softmax(logits / temperature)
    restricted to the top_k most likely tokens (0: all) and then to the smallest set of most
    likely tokens whose probability reaches top_p (1.0: all; the most likely token always stays),
    renormalised."""
    if temperature <= 0:
        raise ValueError(f"decode.temperature={temperature}: must be > 0 (greedy is beam_size=1)")
    logits = logits.float() / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (R, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        # drop a token when the tokens above it already hold top_p
        drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        probs = probs.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), 0.0)  # unsorted
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


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
