"""Token cross-entropy over a large vocabulary, in fewer passes over the logits than
`F.cross_entropy(logits.float(), ...)`.

The teacher-forced logits are the largest tensor of a training step ((B*T, V): 12.8M values at
batch 64, 20 tokens and 10,000 words). Under bf16 autocast the usual recipe casts them to fp32
(a copy), takes log_softmax (a second (B*T, V) tensor), gathers, then in backward fills a zero
(B*T, V) gradient, scatters, runs log_softmax's backward and casts back: about eight passes of
memory traffic, on a CPU a large share of a step (docs/benchmarks.md: "The hot paths"). This
computes the same loss and the same gradient row chunk by row chunk (each chunk's fp32 copy
stays in cache) and writes the gradient once in the logits' own dtype. When the logits need a
gradient (training), it is made in the forward pass from the same chunk, whose softmax is then
already at hand: one exp per value instead of two (the loss's log-sum-exp, then backward's
softmax), half the loss's time at batch 64 x 20 tokens x 10,000 words on a CPU (docs/benchmarks.md);
backward only scales it. float16 logits keep the backward-time gradient: unscaled gradients of
~1e-8 would flush to zero in float16 before a GradScaler's scale reached them. Same numbers as
F.cross_entropy with `ignore_index` and `label_smoothing` (tests/test_losses.py), float32
accumulation whatever the input dtype.
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
        count = keep.sum()
        # the gradient now, from the chunk's softmax (not for float16: see the module docstring)
        now = ctx.needs_input_grad[0] and logits.dtype != torch.float16
        scale = (keep / count).unsqueeze(1)  # (R, 1) float32: d loss / d row's loss
        grad = torch.empty_like(logits) if now else None
        lse = torch.empty(rows, 1, device=logits.device)  # (R, 1) float32
        per_row = torch.empty(rows, 1, device=logits.device)
        for i in range(0, rows, CHUNK_ROWS):
            s = slice(i, i + CHUNK_ROWS)
            x = logits[s].to(torch.float32, copy=True)  # (C, V), ours to overwrite
            # -log p(target) = lse - x_t; smoothing's uniform term: -mean_j log p_j = lse - mean_j x_j
            picked = x.gather(1, safe[s])
            per_row[s] = (1 - smoothing) * picked + (smoothing * x.mean(-1, keepdim=True) if smoothing else 0)
            top = x.amax(-1, keepdim=True)
            total = x.sub_(top).exp_().sum(-1, keepdim=True)  # x is now exp(x - max)
            lse[s] = top + total.log()
            if now:
                grad[s] = _gradient_(x, scale[s] / total, safe[s], scale[s], smoothing)
        # 0 / 0 = nan when every row is ignored, as F's
        loss = ((lse - per_row).squeeze(1) * keep).sum() / count
        ctx.save_for_backward(grad if now else logits, safe, lse, scale)
        ctx.now, ctx.smoothing = now, smoothing
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        saved, safe, lse, scale = ctx.saved_tensors
        if ctx.now:  # made in forward for d loss = 1; a backward through a scaled loss scales it
            if grad_loss.device.type == "cpu" and grad_loss.item() == 1.0:
                return saved, None, None, None  # the usual case: no pass over (R, V) at all
            return saved * grad_loss.to(saved.dtype), None, None, None
        scale = scale * grad_loss
        out = torch.empty_like(saved)
        for i in range(0, saved.shape[0], CHUNK_ROWS):
            s = slice(i, i + CHUNK_ROWS)
            p = saved[s].to(torch.float32, copy=True).sub_(lse[s]).exp_()  # (C, V) softmax
            out[s] = _gradient_(p, scale[s], safe[s], scale[s], ctx.smoothing)
        return out, None, None, None


def _gradient_(e: torch.Tensor, factor: torch.Tensor, safe: torch.Tensor, scale: torch.Tensor,
               smoothing: float) -> torch.Tensor:
    """In place, the loss's gradient for a chunk: e (C, V) float32 with e * factor = p_j * scale
    (the softmax times d loss / d row's loss, scale (C, 1)) -> d loss / d x_j = scale * (p_j -
    smoothing / V - (1 - smoothing) [j = target]); safe (C, 1) the targets."""
    e.mul_(factor)
    if smoothing:
        e.sub_(scale * (smoothing / e.shape[-1]))
    return e.scatter_add_(1, safe, scale * (smoothing - 1.0))


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean token cross-entropy: logits (R, V) in any float dtype, target (R,) -> scalar float32;
    rows whose target is `ignore_index` count for nothing. F.cross_entropy's value and gradient."""
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(f"logits must be (R, V) and target (R,); got {tuple(logits.shape)} and "
                         f"{tuple(target.shape)}")
    return _TokenCrossEntropy.apply(logits, target, ignore_index, float(label_smoothing))


def teacher_forced_loss(model: torch.nn.Module, features: torch.Tensor, tokens: torch.Tensor,
                        image_index: torch.Tensor, pad: int, label_smoothing: float = 0.0,
                        sample_prob: float = 0.0, **regions) -> tuple[torch.Tensor, torch.Tensor]:
    """The cross-entropy step's loss: raw features (I, N, C), tokens (B, T) with <bos> first,
    image_index (B,) -> (mean token loss over non-padding targets, attention weights (B, T-1, N)).
    `regions`: mask (I, N) and boxes (I, N, 4) of region features."""
    targets = tokens[:, 1:]  # (B, T-1)
    lengths = (targets != pad).sum(1)  # padding is never computed
    logits, weights = model(features, tokens[:, :-1], lengths, image_index,
                            sample_prob=sample_prob, **regions)  # (B, T-1, V), (B, T-1, N)
    # F.cross_entropy's numbers in fewer passes over the logits (cross_entropy above)
    loss = cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad,
                         label_smoothing=label_smoothing)
    return loss, weights
