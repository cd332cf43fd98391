"""Token cross-entropy over a large vocabulary, in fewer passes over the logits than
`F.cross_entropy(logits.float(), ...)`.

The teacher-forced logits are the largest tensor of a training step ((B*T, V): 12.8M values at
batch 64, 20 tokens and 10,000 words). Under bf16 autocast the usual recipe casts them to fp32
(a copy), takes log_softmax (a second (B*T, V) tensor), gathers, then in backward fills a zero
(B*T, V) gradient, scatters, runs log_softmax's backward and casts back: about eight passes of
memory traffic, on a CPU a large share of a step (docs/benchmarks.md: "Hot paths"). This
computes the same loss and the same gradient row chunk by row chunk (each chunk's fp32 copy
stays in cache), keeps only the row log-sum-exps for backward, and writes the gradient once in
the logits' own dtype. Same numbers as F.cross_entropy with `ignore_index` and
`label_smoothing` (tests/test_losses.py), float32 accumulation whatever the input dtype.
"""

from __future__ import annotations

import torch

CHUNK_ROWS = 128  # 128 x 10,000 fp32 values = 5 MB: one chunk's temporaries stay in cache


class _TokenCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, ignore_index: int,
                smoothing: float) -> torch.Tensor:
        rows = logits.shape[0]
        keep = target != ignore_index  # (R,)
        safe = target.masked_fill(~keep, 0).unsqueeze(1)  # (R, 1) any valid index for ignored rows
        lse = torch.empty(rows, device=logits.device)  # (R,) float32
        per_row = torch.empty(rows, device=logits.device)
        for i in range(0, rows, CHUNK_ROWS):
            x = logits[i : i + CHUNK_ROWS].float()  # (C, V)
            lse[i : i + CHUNK_ROWS] = torch.logsumexp(x, -1)
            # -log p(target) = lse - x_t; smoothing's uniform term: -mean_j log p_j = lse - mean_j x_j
            picked = x.gather(1, safe[i : i + CHUNK_ROWS]).squeeze(1)
            per_row[i : i + CHUNK_ROWS] = (1 - smoothing) * picked + smoothing * x.mean(-1)
        count = keep.sum()
        loss = ((lse - per_row) * keep).sum() / count  # 0 / 0 = nan when every row is ignored, as F's
        ctx.save_for_backward(logits, safe, lse, keep, count)
        ctx.smoothing = smoothing
        return loss

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, safe, lse, keep, count = ctx.saved_tensors
        smoothing, vocab = ctx.smoothing, logits.shape[-1]
        scale = (grad / count) * keep  # (R,) float32
        out = torch.empty_like(logits)
        for i in range(0, logits.shape[0], CHUNK_ROWS):
            s = slice(i, i + CHUNK_ROWS)
            # d loss / d x_j = scale * (p_j - smoothing / V - (1 - smoothing) [j = target])
            p = logits[s].to(torch.float32, copy=True).sub_(lse[s, None]).exp_()  # (C, V) softmax
            p.sub_(smoothing / vocab)
            p.scatter_add_(1, safe[s], p.new_full((p.shape[0], 1), smoothing - 1.0))
            out[s] = p.mul_(scale[s, None])
        return out, None, None, None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean token cross-entropy: logits (R, V) in any float dtype, target (R,) -> scalar float32;
    rows whose target is `ignore_index` count for nothing. F.cross_entropy's value and gradient."""
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(f"logits must be (R, V) and target (R,); got {tuple(logits.shape)} and "
                         f"{tuple(target.shape)}")
    return _TokenCrossEntropy.apply(logits, target, ignore_index, float(label_smoothing))
