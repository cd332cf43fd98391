"""Which device a `device=` / `encoder.device` setting names (`resolve_device`). The CPU settings
every entry point makes once are models/cpu_speed's `configure_cpu()`."""

from __future__ import annotations

import torch

from .errors import UserError


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """`encoder.device`, the scripts' `device=`: auto = the GPU when there is one (training's
    `trainer.accelerator=auto` rule), else cpu; or cpu, cuda, cuda:N, as torch names them. A name
    torch does not know, or a GPU that is not there, is a UserError saying so."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"device={device!r} is not a device name; use auto, cpu, cuda or cuda:N") from None
    if where.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device={device} but torch sees no CUDA GPU here; use device=cpu or auto")
    if where.type == "cuda" and where.index is not None and where.index >= torch.cuda.device_count():
        raise UserError(f"device={device} but this machine has {torch.cuda.device_count()} GPU(s)")
    return where
