"""Where and how torch runs, one home: the CPU settings every entry point makes once, before
torch starts its threads and creates its first oneDNN kernel (`configure_cpu()`), and which
device a `device=` / `encoder.device` setting names (`resolve_device`)."""

from __future__ import annotations

import os

import torch

from .errors import UserError

# oneDNN kernels kept ready (its default is 1024). Each matmul shape has its own bf16 kernel; the
# LSTM decoder's batch shrinks step by step with the captions' lengths, and forward and backward
# of a training batch then meet more shapes than 1024 kernels hold, so bf16 training made its
# kernels again at every step: 1.6-1.7x slower steps at the built-in run's shapes on an AMX CPU
# (docs/benchmarks.md: "Training precision"). A few KB per kernel.
ONEDNN_KERNEL_CACHE = 16384


def configure_cpu() -> bool:
    """flush_denormals(), and a larger oneDNN kernel cache unless ONEDNN_PRIMITIVE_CACHE_CAPACITY
    is set (oneDNN reads it when it makes its first kernel). -> flush_denormals()'s answer."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_KERNEL_CACHE))
    return flush_denormals()


def flush_denormals() -> bool:
    """Treat denormal floats (|x| < 1.2e-38 in fp32) as zero on the CPU (x86 FTZ/DAZ).

    A sharp softmax makes them: an attention that collapses onto one cell, or a confident
    vocabulary, leaves many probabilities below 1e-38, and x86 cores compute on such numbers
    through slow microcode assists (a Transformer decoder's step several times slower as the
    model sharpened: docs/benchmarks.md); results change in the last digits only. Threads copy
    the setting when they are created, so call this before the first parallel op (every entry
    point does, through configure_cpu; calling it again is harmless).
    GPUs are unaffected. -> whether this CPU supports it."""
    return torch.set_flush_denormal(True)


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
