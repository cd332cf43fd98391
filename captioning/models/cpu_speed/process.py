"""Process-wide CPU settings, made once by every entry point before torch starts its threads and
creates its first oneDNN kernel (`configure_cpu()`). Their measured gains: the package's
docstring (models/cpu_speed/__init__.py)."""

from __future__ import annotations

import ctypes
import os
import sys

import torch

# oneDNN kernels kept ready (its default is 1024). Each matmul shape has its own bf16 kernel; the
# LSTM decoder's batch shrinks step by step with the captions' lengths, and forward and backward
# of a training batch then meet more shapes than 1024 kernels hold, so bf16 training made its
# kernels again at every step (its gain per CPU: the package's docstring). A few KB per kernel.
ONEDNN_KERNEL_CACHE = 16384

# glibc malloc options (mallopt's parameter numbers, malloc.h) and the values set_malloc() gives
# them. A training step allocates and frees tensors of 1-30 MB (the (B, N, A) buffer of additive
# attention at every step, the logits, the gradients); by default glibc serves sizes past its
# threshold with fresh mmaps and hands freed heap back to the kernel, so each step page-faults
# its memory in again (zeroed by the kernel). Keeping it: its gain per CPU in the package's
# docstring.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MALLOC_OPTIONS = {
    M_MMAP_THRESHOLD: 32 << 20,  # glibc's largest: below 32 MB, reuse the heap, never mmap
    M_TRIM_THRESHOLD: 1 << 30,  # return freed heap to the kernel only past 1 GB free at its top
    M_TOP_PAD: 64 << 20,  # grow the heap 64 MB at a time
}


def configure_cpu() -> bool:
    """flush_denormals(), a larger oneDNN kernel cache unless ONEDNN_PRIMITIVE_CACHE_CAPACITY
    is set (oneDNN reads it when it makes its first kernel), and set_malloc().
    -> flush_denormals()'s answer."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_KERNEL_CACHE))
    set_malloc()
    return flush_denormals()


def set_malloc() -> bool:
    """Keep freed memory in the process for the next step (MALLOC_OPTIONS says why), where the
    C library is glibc and the user has not tuned it (MALLOC_* or GLIBC_TUNABLES in the
    environment: theirs wins). The cost: memory freed by a step stays counted in the process's
    RSS up to its peak (plus 64 MB), instead of going back to the kernel. -> whether it was set."""
    if not sys.platform.startswith("linux") or "GLIBC_TUNABLES" in os.environ or any(
        k.startswith("MALLOC_") for k in os.environ
    ):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and other C libraries: leave them alone
        return False
    # All three or none that matters: setting the trim threshold alone freezes the mmap threshold
    # at 128 KB (glibc stops adapting it) and every tensor past that is mmapped: 1.7x slower steps.
    return all(mallopt(option, value) == 1 for option, value in MALLOC_OPTIONS.items())


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
