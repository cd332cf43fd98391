"""The optimiser and its schedules as Lightning takes them: the `optim` config instantiated over
the trainable parameter groups, the learning-rate rule for several processes, and the re-plan
of a one-cycle schedule when a resumed run is made longer."""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable

import hydra
import torch


def param_groups(model: torch.nn.Module, encoder_cfg: dict) -> list[dict]:
    """The trainable parameters: the decoder's at the optimiser's rate, a fine-tuned encoder's
    trained stages at encoder.finetune_lr (frozen ones are not handed over; an encoder config
    without the key, precomputed features', has none)."""
    encoder = model.encoder
    tuned = [p for p in encoder.parameters() if p.requires_grad] if encoder is not None else []
    ids = {id(p) for p in tuned}
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    if not tuned:
        return [{"params": rest}]
    return [{"params": rest}, {"params": tuned, "lr": encoder_cfg["finetune_lr"]}]


def build_optimizers(optim: dict, groups: list[dict], world_size: int, total_steps: Callable[[], int],
                     monitor: str):
    """What `configure_optimizers` returns for the `optim` config. `total_steps` is called only
    for a schedule that takes its length (Lightning's estimate reads the data loaders);
    `monitor` is the score a plateau schedule steps on."""
    scale = lr_scale(optim["lr_scaling"], world_size)
    # Both configs are `_partial_: true`: instantiate gives a partial, called here.
    optimizer = hydra.utils.instantiate(optim["optimizer"])(params=groups)
    base = optimizer.defaults["lr"]
    for group in optimizer.param_groups:
        group["lr"] *= scale
    if not optim.get("scheduler"):
        return optimizer
    # one-cycle: each group's peak keeps its ratio to the base rate (the tuned encoder's own)
    extra = ({"max_lr": [optim["scheduler"]["max_lr"] * g["lr"] / base for g in optimizer.param_groups]}
             if "max_lr" in optim["scheduler"] else {})
    make = hydra.utils.instantiate(optim["scheduler"])
    if "total_steps" in inspect.signature(make.func).parameters:  # step schedules: their length
        extra["total_steps"] = int(total_steps())
    scheduler = make(optimizer=optimizer, **extra)
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):  # schedule=plateau
        plateau = {"scheduler": scheduler, "interval": "epoch", "monitor": monitor}
        if getattr(scheduler, "warmup", None) is None:
            return {"optimizer": optimizer, "lr_scheduler": plateau}
        # schedule=warmup_plateau: its warm-up steps per batch, the plateau rule per epoch
        return [optimizer], [{"scheduler": scheduler.warmup, "interval": "step"}, plateau]
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def lr_scale(rule: str, world_size: int) -> float:
    """The learning-rate factor for `world_size` processes, each with data.batch_size images
    (global batch x world_size): none 1, sqrt sqrt(W), linear W."""
    return {"none": 1.0, "sqrt": math.sqrt(world_size), "linear": float(world_size)}[rule]


def replan_one_cycle(scheduler: torch.optim.lr_scheduler.OneCycleLR, total: int) -> None:
    """Stretch a one-cycle schedule (already `last_epoch` steps in) to `total` steps: the phase
    boundaries move with the same proportions, so the learning rate at the current step becomes
    the longer schedule's (after warm-up: higher than where the short one was)."""
    old = scheduler.total_steps
    for phase in scheduler._schedule_phases:
        phase["end_step"] = (phase["end_step"] + 1) * total / old - 1
    scheduler.total_steps = total
    with warnings.catch_warnings():  # get_lr() outside step() warns; here it is the point
        warnings.simplefilter("ignore", UserWarning)
        lrs = scheduler.get_lr()
    for group, lr in zip(scheduler.optimizer.param_groups, lrs):
        group["lr"] = lr
    scheduler._last_lr = list(lrs)
