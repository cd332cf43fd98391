"""Learning-rate schedules the `schedule` config group names beyond torch's own."""

from __future__ import annotations

import math

import torch


def warmup_cosine(optimizer: torch.optim.Optimizer, total_steps: int, *, warmup_pct: float,
                  min_lr_ratio: float) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to each group's lr over warmup_pct of total_steps, then cosine decay to
    min_lr_ratio x that lr at the last step (per group: a fine-tuned encoder keeps its ratio)."""
    warmup = max(1, round(total_steps * warmup_pct))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - 1 - warmup))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class WarmupPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """ReduceLROnPlateau after a linear warm-up: each group's lr rises from lr / warmup_steps to
    lr over the first warmup_steps optimiser steps (`self.warmup`, a chainable LinearLR that
    CaptioningModule.configure_optimizers steps per batch), then is multiplied by `factor`
    whenever the monitored score has not improved for `patience` validations. A schedule whose
    length is not the epoch cap: with early stopping, a run's schedule does not depend on how
    long it may train, only on how long it improves."""

    def __init__(self, optimizer: torch.optim.Optimizer, *, warmup_steps: int, mode: str,
                 factor: float, patience: int, threshold: float = 1e-4,
                 threshold_mode: str = "rel", cooldown: int = 0, min_lr: float = 0.0,
                 eps: float = 1e-8) -> None:
        # ReduceLROnPlateau's arguments spelled out: config_check checks the config's keys against them
        super().__init__(optimizer, mode=mode, factor=factor, patience=patience, threshold=threshold,
                         threshold_mode=threshold_mode, cooldown=cooldown, min_lr=min_lr, eps=eps)
        self.warmup = (torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / warmup_steps,
                                                         total_iters=warmup_steps)
                       if warmup_steps > 0 else None)

    def state_dict(self) -> dict:
        # The warm-up scheduler is Lightning's second scheduler, saved on its own: not pickled here.
        return {k: v for k, v in super().state_dict().items() if k != "warmup"}

    def load_state_dict(self, state_dict: dict) -> None:
        warmup = self.warmup
        super().load_state_dict(state_dict)
        self.warmup = warmup
