"""Decoding on a CPU with every linear layer's weight packed once for oneDNN, not at every token.

A decoding step multiplies a small batch (M = 64 rows: one per image or beam) by the same
weights at every token. `F.linear` hands a plain row-major weight to the GEMM, which re-lays it
out for its kernel on each call: at M = 64 that is a large share of the product (the vocabulary
head: a third of its time in bf16, over half in fp32 through MKL; docs/benchmarks.md, "The hot
paths"). `packed_linears` packs each nn.Linear's weight once, lazily at its first
call in the dtype that call runs in (autocast's, or the input's), and serves the decoding from
the packed copy.

bf16 outputs are those of `F.linear` under autocast bit for bit (the same rounded weights, the
same kernel family); fp32 outputs differ in the last bits (oneDNN's summation order against
MKL's): a near-tie between two words can break the other way, as it can between two machines.
It applies only where it is safe and measured: a CPU with oneDNN, gradients off (the packed
product has no backward), no module already replaced (torch.compile's forward, or an outer
`packed_linears`: nesting is a no-op), and float32/bfloat16 only (float16 keeps `F.linear`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

_DTYPES = (torch.float32, torch.bfloat16)


def available() -> bool:
    """oneDNN is built in, not switched off (`torch.backends.mkldnn.flags(enabled=False)`), and its
    packed linear ops exist (they are private: checked, not assumed)."""
    ops = getattr(torch.ops, "mkldnn", None)
    return (torch.backends.mkldnn.is_available() and bool(torch.backends.mkldnn.enabled)
            and hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise"))


@functools.cache
def packs_in(dtype: torch.dtype) -> bool:
    """Whether this CPU's oneDNN packs and multiplies in `dtype`: tried once on a tiny weight.
    oneDNN refuses bf16 on CPUs without AVX-512 (AVX2 only) or AVX-NE-CONVERT; those keep F.linear."""
    try:
        w = torch.ones(2, 2, dtype=dtype, device="cpu")  # a probe of the CPU, by design
        packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
        return bool(torch.ops.mkldnn._linear_pointwise(w, packed, None, "none", [], "").eq(2).all())
    except RuntimeError:
        return False


class _PackedForward:
    """Stands in for one nn.Linear's forward: packs its weight per dtype at first use."""

    def __init__(self, linear: nn.Linear) -> None:
        self.linear, self.packs = linear, {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        linear = self.linear
        if torch.is_autocast_enabled("cpu"):
            dtype = torch.get_autocast_dtype("cpu")
        elif x.dtype == linear.weight.dtype:
            dtype = x.dtype
        else:  # F.linear's own error (or promotion rule) for mixed dtypes, unchanged
            dtype = None
        if (dtype not in _DTYPES or torch.is_grad_enabled() or x.device.type != "cpu"
                or not packs_in(dtype)):
            return nn.Linear.forward(linear, x)
        if dtype not in self.packs:
            w = linear.weight.detach().to(dtype)
            bias = None if linear.bias is None else linear.bias.detach().to(dtype)
            self.packs[dtype] = (torch.ops.mkldnn._reorder_linear_weight(w, None), bias)
        packed, bias = self.packs[dtype]
        return torch.ops.mkldnn._linear_pointwise(x.to(dtype), packed, bias, "none", [], "")


@contextmanager
def packed_linears(module: nn.Module) -> Iterator[None]:
    """Inside the block, every nn.Linear of `module` on the CPU runs from a packed weight (see
    the module's docstring for when it applies); the modules are restored on exit. Weights are
    read when first used inside the block: do not change them inside it. A module with
    `pack_linears = False` opts out (the benchmark's `_unpacked` rows measure what packing saves)."""
    if not isinstance(module, nn.Module):  # a duck-typed decoder (the decoding API only)
        yield
        return
    modules = list(module.modules())
    linears = [m for m in modules if isinstance(m, nn.Linear)]
    replaced = any("forward" in m.__dict__ for m in modules)
    if (not getattr(module, "pack_linears", True) or replaced or torch.is_grad_enabled()
            or not linears or not available() or any(m.weight.device.type != "cpu" for m in linears)):
        yield
        return
    try:
        for m in linears:
            m.forward = _PackedForward(m)
        yield
    finally:
        for m in linears:
            m.__dict__.pop("forward", None)


def decoding_packed(fn: Callable) -> Callable:
    """Decorator for a decoding function whose first argument is the decoder: the whole search
    runs inside `packed_linears(decoder)`."""

    @functools.wraps(fn)
    def wrapper(decoder: nn.Module, *args, **kwargs):
        with packed_linears(decoder):
            return fn(decoder, *args, **kwargs)

    return wrapper
