"""Which precision is faster on this CPU: measured on the machine (CPU model, torch version,
thread count) at the model's own shapes, cached on disk, never guessed from a CPU flag.

bf16 matmuls are several times faster than fp32 on AMX CPUs and on AMD CPUs with AVX-512 BF16,
and slower on AVX-512 Intel CPUs without them (docs/benchmarks.md): only a timing tells them
apart. What is timed, fp32 against bf16 autocast:
- `encoder`: a 3x3 convolution of a ResNet's third stage (feature extraction, the frozen part
  of a fine-tuned encoder, caption.py);
- `decoder`: the decoder's matmuls (the vocabulary projection of a batch of 64 x 20 tokens, a
  key projection of 64 x 16 cells of 2048-d features);
- a training step of a run's own model at its own batch shapes (`trainer.precision=auto`,
  lit/auto_precision.py), once per model and shape signature: a decoder of many small steps can be
  slower in bf16 on a CPU whose bf16 matmuls are faster (autocast's casts, bf16 elementwise work).
bf16 is chosen where it takes at most MARGIN of fp32's time. The cache is
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
CUT_SHORT = 5.0  # bf16's first call this many times slower than fp32's: no need to time it further
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


def _race(run: Callable[[torch.dtype], object], repeats: int, warmup: int = 1) -> dict:
    """fp32 against bf16 for `run(dtype)` -> {"fp32_s", "bf16_s", "choice"}: medians of
    `repeats` timed calls each after `warmup` untimed calls each (kernels made and cached, memory
    allocated: a long run pays that once), the two precisions alternating so that a drift of the
    machine's speed (another process, the clock) falls on both alike. A bf16 that fails to run
    (no bf16 kernels) gives fp32; so does one whose first call takes over CUT_SHORT times fp32's
    (a CPU without bf16 arithmetic: AVX2 emulates it 7-34x slower, docs/benchmarks.md), timed no
    further: the first calls' times are reported, with "cut_short"."""
    first: dict[torch.dtype, float] = {}
    for dtype in (torch.float32, torch.bfloat16):
        start = time.perf_counter()
        try:
            run(dtype)
        except RuntimeError as err:  # bf16 unsupported here
            if dtype == torch.float32:
                raise
            log.warning("precision: bf16 does not run on this CPU (%s): fp32", err)
            continue
        first[dtype] = time.perf_counter() - start
    dtypes = list(first)
    fp32, bf16 = first[torch.float32], first.get(torch.bfloat16, 0.0)
    # (and by a tenth of a second at least: microsecond calls' ratios are noise)
    if bf16 > CUT_SHORT * fp32 and bf16 - fp32 > 0.1:
        return {"fp32_s": round(fp32, 5), "bf16_s": round(bf16, 5), "choice": "fp32",
                "cut_short": True}
    for _ in range(warmup - 1):
        for dtype in dtypes:
            run(dtype)
    times: dict[torch.dtype, list[float]] = {d: [] for d in dtypes}
    for _ in range(repeats):
        for dtype in dtypes:
            start = time.perf_counter()
            run(dtype)
            times[dtype].append(time.perf_counter() - start)
    fp32 = statistics.median(times[torch.float32])
    bf16 = statistics.median(times[torch.bfloat16]) if torch.bfloat16 in times else None
    return {"fp32_s": round(fp32, 5), "bf16_s": None if bf16 is None else round(bf16, 5),
            "choice": "bf16" if bf16 is not None and bf16 <= MARGIN * fp32 else "fp32"}


def _inference(step: Callable[[], object]) -> Callable[[torch.dtype], object]:
    def run(dtype: torch.dtype) -> object:
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            return step()
    return run


def measure() -> dict:
    """Time fp32 against bf16 for every kind -> {kind: {"fp32_s", "bf16_s", "fp32_tflops", "choice"}}."""
    out = {}
    for kind in KINDS:
        step, flops = _work(kind)
        out[kind] = _race(_inference(step), 5)
        out[kind]["fp32_tflops"] = round(flops / out[kind]["fp32_s"] / 1e12, 3)
    return out


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _update(path: Path, key: str, change: Callable[[dict], None]) -> dict:
    """Apply `change` to this machine's entry in the cache file, read just before writing (another
    process may have added to it), atomically -> the entry."""
    cached = _read(path)
    change(cached.setdefault(key, {}))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cached, indent=1))
    tmp.replace(path)
    return cached[key]


def calibration(measure_fn: Callable[[], dict] | None = None) -> dict:
    """This machine's calibration: from the cache, else measured now (once) and cached."""
    key = machine()
    path = cache_path()
    if (key, str(path)) in _MEMO:
        return _MEMO[(key, str(path))]
    entry = _read(path).get(key, {})
    if not all(kind in entry for kind in KINDS):
        result = (measure_fn or measure)()
        entry = _update(path, key, lambda e: e.update(result))
        log.info("precision: measured on %s: %s (cached in %s; delete it to measure again)",
                 key, "; ".join(_describe(kind, r) for kind, r in result.items()), path)
    _MEMO[(key, str(path))] = entry
    return entry


def training_choice(signature: str, run: Callable[[torch.dtype], object], repeats: int = 5,
                    warmup: int = 1) -> dict:
    """fp32 against bf16 autocast for one training step at a run's own shapes: `run(dtype)` does
    forward (under autocast to dtype), backward and the optimiser step on a copy of the model.
    Measured once per machine and `signature` (what decides the step's cost: model, shapes),
    cached beside the kernel calibration -> {"fp32_s", "bf16_s", "choice"}."""
    key, path = machine(), cache_path()
    entry = _read(path).get(key, {}).get("train", {}).get(signature)
    if entry is None:
        entry = _race(run, repeats, warmup)
        _update(path, key, lambda e: e.setdefault("train", {}).update({signature: entry}))
        log.info("precision: measured a training step (%s) on %s: %s (cached in %s; delete it to "
                 "measure again)", signature, key, _describe("step", entry), path)
    return entry


def _describe(kind: str, r: dict) -> str:
    bf16 = "n/a" if r["bf16_s"] is None else f"{r['bf16_s'] * 1e3:.1f} ms"
    cut = " (first calls only: bf16 far slower)" if r.get("cut_short") else ""
    return f"{kind} fp32 {r['fp32_s'] * 1e3:.1f} ms, bf16 {bf16}{cut} -> {r['choice']}"


def calibrated_dtype(kind: str) -> torch.dtype:
    """The faster CPU precision for `kind` (encoder | decoder) on this machine."""
    if kind not in KINDS:
        raise ValueError(f"unknown precision kind '{kind}'; known: {', '.join(KINDS)}")
    return torch.bfloat16 if calibration()[kind]["choice"] == "bf16" else torch.float32


def to_autocast_dtype(x: torch.Tensor) -> torch.Tensor:
    """x in the dtype autocast gives matmuls on its device when autocast is on there, else x:
    a tensor that feeds several projections is cast once instead of once per projection."""
    device = x.device.type
    if torch.is_autocast_enabled(device) and x.is_floating_point():
        return x.to(torch.get_autocast_dtype(device))
    return x
