"""A CPU floating-point setting every entry point makes once, before torch starts its threads."""

from __future__ import annotations

import torch


def flush_denormals() -> bool:
    """Treat denormal floats (|x| < 1.2e-38 in fp32) as zero on the CPU (x86 FTZ/DAZ).

    A sharp softmax makes them: an attention that collapses onto one cell, or a confident
    vocabulary, leaves many probabilities below 1e-38, and x86 cores compute on such numbers
    through slow microcode assists. Measured on a Transformer decoder at epoch 4 of
    `decoder=transformer attention=aoa`: a training step 4.08x slower without this, and epochs
    slowing ~3x as the model sharpened (docs/benchmarks.md); results change in the last digits
    only. Threads copy the setting when they are created, so call this before the first
    parallel op (every entry point does; calling it again is harmless).
    GPUs are unaffected. -> whether this CPU supports it."""
    return torch.set_flush_denormal(True)
