"""Learning-rate schedules the `schedule` config group names beyond torch's own."""

from __future__ import annotations

import math

import torch


def warmup_cosine(optimizer: torch.optim.Optimizer, total_steps: int, warmup_pct: float = 0.05,
                  min_lr_ratio: float = 0.0) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to each group's lr over warmup_pct of total_steps, then cosine decay to
    min_lr_ratio x that lr at the last step (per group: a fine-tuned encoder keeps its ratio)."""
    warmup = max(1, round(total_steps * warmup_pct))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - 1 - warmup))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
