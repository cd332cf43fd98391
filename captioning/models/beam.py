"""Batched beam search over the decoder API (prepare / init_state / step / reorder).

Keys are prepared once per image and read by all its beams without copies (the attention
modules treat an image's beams as extra queries); images whose search is over leave the batch,
so finished work costs nothing. Scores are summed log-probabilities divided by the GNMT length
penalty ((5 + len) / 6) ** alpha; alpha = 0 ranks by plain log-probability.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cpu_speed import decoding_packed
from .decoding import constrain


@dataclass
class Hypothesis:
    tokens: list[int]  # without <bos>, ending with <eos> unless cut at max_len
    score: float  # length-penalised
    logprob: float
    weights: torch.Tensor  # (len, N) attention weights per generated token


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
@decoding_packed  # every linear's weight packed once per search, not per token
def beam_search(
    decoder,
    features: torch.Tensor,
    bos: int,
    eos: int,
    beam_size: int = 5,
    max_len: int = 30,
    alpha: float = 0.0,
    block_ngram: int = 0,
    n_best: int = 1,
    mask: torch.Tensor | None = None,
    banned: tuple[int, ...] = (),
    min_len: int = 0,
    positions: torch.Tensor | None = None,
) -> list[list[Hypothesis]]:
    """features (B, N, D) -> per image the n_best hypotheses (n_best <= beam_size), best first.

    The step rules (decoding.constrain): `banned` token ids (e.g. <pad>, <bos>) are never
    generated, `block_ngram` = n forbids repeating any n-gram within a hypothesis, no <eos>
    before min_len words. mask (B, N) and positions (B, N, 2): region features.
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"decode.n_best={n_best}: must be between 1 and decode.beam_size={beam_size}")
    b, k = features.shape[0], beam_size
    device = features.device
    prepared = decoder.prepare(features, mask, positions)  # (B, ...) once per image, never per beam
    rows = torch.arange(b, device=device).repeat_interleave(k)
    state = decoder.reorder(decoder.init_state(prepared, features), rows, images=slice(None))
    # rows: image-major, k beams each; attention reads an image's k rows against its keys
    scores = torch.full((b, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: keep one alive
    seqs = torch.zeros(b * k, 0, dtype=torch.long, device=device)
    attn: torch.Tensor | None = None  # (R, t, N)
    tokens = torch.full((b * k,), bos, dtype=torch.long, device=device)
    active = list(range(b))  # image ids still searching, in row order
    finished: list[list[Hypothesis]] = [[] for _ in range(b)]
    for t in range(max_len):
        logits, state, w = decoder.step(tokens, state)
        logits = logits.float()  # (R, V)
        vocab = logits.shape[-1]
        lse = logits.logsumexp(-1, keepdim=True)  # (R, 1): log-probs are logits - lse
        logits = constrain(logits, seqs, t, eos, banned, block_ngram, min_len)
        attn = w.unsqueeze(1) if attn is None else torch.cat([attn, w.unsqueeze(1)], 1)
        # The best 2k of an image's k * V candidates lie among each beam's own best 2k tokens:
        # select per row first, so the full (R, V) log-prob table is never built.
        width = min(2 * k, vocab)
        row_s, row_tok = logits.topk(width, dim=-1)  # (R, 2k)
        cand = (scores.view(-1, 1) + row_s - lse).view(len(active), k * width)
        top_s, top_j = cand.topk(min(2 * k, k * width), dim=-1)  # (A, 2k): k survive <eos>
        top_tok = row_tok.view(len(active), k * width).gather(1, top_j)
        # One device-to-host copy per step, not one per image.
        top_s, top_beam, top_tok = top_s.tolist(), (top_j // width).tolist(), top_tok.tolist()
        keep_rows, keep_tok, keep_scores, still, kept = [], [], [], [], []
        lp_now = length_penalty(t + 1, alpha)
        best_possible = length_penalty(max_len, alpha)
        for a, img in enumerate(active):
            new = []
            for s, beam, tok in zip(top_s[a], top_beam[a], top_tok[a]):
                if s == float("-inf"):
                    break
                row = a * k + beam
                if tok == eos or t == max_len - 1:  # at max_len every hypothesis is cut
                    # Host copies per finished hypothesis (a few per image, not per step): a
                    # finished hypothesis leaves the device for good.
                    seq = seqs[row].tolist() + [tok]
                    finished[img].append(Hypothesis(seq, s / lp_now, s, attn[row].cpu()))
                elif len(new) < k:
                    new.append((row, tok, s))
                if len(new) == k and tok != eos:
                    break
            done_list = sorted(finished[img], key=lambda h: -h.score)[:k]
            finished[img] = done_list
            # Log-probs only fall, so an active beam can at best reach s / lp(max_len) (alpha >= 0).
            bound = max((s for _, _, s in new), default=float("-inf")) / best_possible
            if not new or (len(done_list) >= k and done_list[-1].score >= bound):
                continue
            new += [(new[0][0], new[0][1], float("-inf"))] * (k - len(new))  # pad dead beams
            still.append(img)
            kept.append(a)
            for row, tok, s in new:
                keep_rows.append(row)
                keep_tok.append(tok)
                keep_scores.append(s)
        if not still:
            break
        index = torch.tensor(keep_rows, device=device)
        # Finished images drop out of the batch; their prepared keys are dropped only then.
        images = slice(None) if len(kept) == len(active) else torch.tensor(kept, device=device)
        state = decoder.reorder(state, index, images)
        seqs = torch.cat([seqs[index], torch.tensor(keep_tok, device=device).unsqueeze(1)], 1)
        attn = attn[index]
        tokens = torch.tensor(keep_tok, device=device)
        scores = torch.tensor(keep_scores, device=device).view(len(still), k)
        active = still
    return [sorted(f, key=lambda h: -h.score)[:n_best] for f in finished]
