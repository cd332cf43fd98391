"""Which precision is faster on this CPU: measured once per machine (CPU model, torch version,
thread count) at the model's own shapes, cached on disk, never guessed from a CPU flag.

bf16 matmuls are ~4x fp32 on AMX and on AMD CPUs with AVX-512 BF16, and slower than fp32 on
AVX-512 Intel CPUs without them (docs/benchmarks.md): only a timing tells them apart. Two
classes of work are timed, fp32 against bf16 autocast:
- `encoder`: a 3x3 convolution of a ResNet's third stage (feature extraction, the frozen part
  of a fine-tuned encoder, caption.py);
- `decoder`: the decoder's matmuls (the vocabulary projection of a batch of 64 x 20 tokens, a
  key projection of 64 x 16 cells of 2048-d features).
bf16 is chosen for a class where it takes at most MARGIN of fp32's time. The cache is
`$CAPTIONING_CACHE_DIR/precision.json` (default `data/cache/`, beside the feature stores); one
log line says what was measured and chosen. torch and the standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger(__name__)

MARGIN = 0.9  # bf16 must take at most 90 % of fp32's time: a tie keeps fp32's exactness
KINDS = ("encoder", "decoder")
_MEMO: dict[tuple, dict] = {}


def cache_path() -> Path:
    return Path(os.environ.get("CAPTIONING_CACHE_DIR", "data/cache")) / "precision.json"


def machine() -> str:
    """What a calibration holds for: the CPU model, torch version and thread count."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return f"{name} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def _work(kind: str) -> tuple[Callable[[], torch.Tensor], float]:
    """(one step of `kind`'s work at the model's shapes, its FLOPs)."""
    g, cpu = torch.Generator().manual_seed(0), torch.device("cpu")  # a CPU calibration, by design
    if kind == "encoder":
        x = torch.randn(32, 256, 16, 16, generator=g, device=cpu)
        x = x.contiguous(memory_format=torch.channels_last)
        conv = torch.nn.Conv2d(256, 256, 3, padding=1, bias=False).to(memory_format=torch.channels_last)
        return (lambda: conv(x)), 2 * 32 * 256 * 256 * 9 * 16 * 16
    tokens = torch.randn(64 * 20, 512, generator=g, device=cpu)
    vocab = torch.randn(512, 10_000, generator=g, device=cpu)
    cells = torch.randn(64 * 16, 2048, generator=g, device=cpu)
    keys = torch.randn(2048, 512, generator=g, device=cpu)
    return (lambda: (tokens @ vocab, cells @ keys)), 2 * (64 * 20 * 512 * 10_000 + 64 * 16 * 2048 * 512)


def _seconds(step: Callable, dtype: torch.dtype, repeats: int = 5) -> float:
    """Median seconds of `step` under CPU autocast to `dtype` (fp32: no autocast)."""
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        step()  # warm-up: kernels chosen, memory allocated
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure() -> dict:
    """Time fp32 against bf16 for every kind -> {kind: {"fp32_s", "bf16_s", "choice"}}; a bf16
    that fails to run (no bf16 kernels) gives fp32."""
    out = {}
    for kind in KINDS:
        step, flops = _work(kind)
        fp32 = _seconds(step, torch.float32)
        try:
            bf16 = _seconds(step, torch.bfloat16)
        except RuntimeError as err:  # bf16 unsupported here
            log.warning("precision: bf16 does not run on this CPU (%s): fp32", err)
            bf16 = float("inf")
        out[kind] = {"fp32_s": round(fp32, 5), "bf16_s": round(bf16, 5) if bf16 != float("inf") else None,
                     "fp32_tflops": round(flops / fp32 / 1e12, 3),
                     "choice": "bf16" if bf16 <= MARGIN * fp32 else "fp32"}
    return out


def calibration(measure_fn: Callable[[], dict] | None = None) -> dict:
    """This machine's calibration: from the cache, else measured now (once) and cached."""
    key = machine()
    path = cache_path()
    if (key, str(path)) in _MEMO:
        return _MEMO[(key, str(path))]
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if key not in cached:
        result = (measure_fn or measure)()
        cached[key] = result
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cached, indent=1))
        tmp.replace(path)
        log.info("precision: measured on %s: %s (cached in %s; delete it to measure again)",
                 key, "; ".join(_describe(kind, r) for kind, r in result.items()), path)
    _MEMO[(key, str(path))] = cached[key]
    return cached[key]


def _describe(kind: str, r: dict) -> str:
    bf16 = "n/a" if r["bf16_s"] is None else f"{r['bf16_s'] * 1e3:.1f} ms"
    return f"{kind} fp32 {r['fp32_s'] * 1e3:.1f} ms, bf16 {bf16} -> {r['choice']}"


def calibrated_dtype(kind: str) -> torch.dtype:
    """The faster CPU precision for `kind` (encoder | decoder) on this machine."""
    if kind not in KINDS:
        raise ValueError(f"unknown precision kind '{kind}'; known: {', '.join(KINDS)}")
    return torch.bfloat16 if calibration()[kind]["choice"] == "bf16" else torch.float32
