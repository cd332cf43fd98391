"""Speed on synthetic tensors. Imports torch and captioning.models only (the encoder section also
needs torchvision and PIL), so it runs on any machine with PyTorch: no Hydra, Lightning, wandb, nltk.
`python scripts/benchmark.py --help` is its command line; `run_benchmark(BenchConfig(...))` its API.

Sections (defaults: batch 64, 7x7 grid of 2048-d features, width 512, vocabulary 10,000, 20 tokens):
  peak     matmul TFLOP/s at fp32 and bf16: the ceiling the decoder's FLOP/s are compared with
  train    decoder training step (forward + backward + AdamW), captions/s, for every attention
           mode and both decoders; the naive baseline (prepare_once=false: keys and values
           projected again at every step, as tutorials do; nothing else changed) at fp32 and
           bf16; achieved FLOP/s and the fraction of the matmul peak (MFU)
  decode   greedy (fast vs naive; Transformer with and without its KV cache), beam 5 batched vs
           the same function called one image at a time
  encoder  feature extraction from image files (JPEG decode + resize in the project's loader)
           vs the bare model forward on ready tensors, same batch and precision
  cpu_speed  each switchable CPU trick (models/cpu_speed) on and off, alternated: the LSTM's
           fused weight gradients and additive's sigmoid-form tanh (training step), packed
           weights (greedy decoding), at fp32 and bf16; the denormal flush (products on
           denormal operands). Not in the default sections.

Every figure is the median of `repeats` timed runs after `warmup`; speed-ups are ratios of
figures measured in this one process.
"""

from __future__ import annotations

import os
import time
from dataclasses import fields

import torch

from ..device import resolve_device
from ..models.cpu_speed import configure_cpu
from ..models.precision_choice import calibrated_dtype
from ..provenance import cpu_kind, git_commit
from .config import DTYPES, BenchConfig, config_fields
from .cpu_speed import bench_cpu_speed
from .sections import bench_decode, bench_encoder, bench_train, matmul_peak
from .tables import markdown, ratios

# The environment variables that hold torch's, oneDNN's and MKL's kernels to an older ISA.
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")

__all__ = ["BenchConfig", "config_fields", "markdown", "run_benchmark"]

def run_benchmark(args: BenchConfig) -> dict:
    """Measure the configured sections -> results (config, peak, train, decode, encoder,
    ratios, wall_s); `markdown(results)` renders them."""
    configure_cpu()  # as training and decoding run
    sections = set(args.sections.split(","))
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    precision = args.precision
    if precision == "auto":
        auto = calibrated_dtype("decoder") if device.type == "cpu" else torch.bfloat16
        precision = next(k for k, v in DTYPES.items() if v == auto)
    results = {
        "config": {f.name: getattr(args, f.name) for f in fields(args)},
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "default_precision": precision,
        # where and when: a committed result (results/convergence/throughput.json) says itself
        "machine": cpu_kind(), "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        # kernels held below what the CPU has (to time another CPU kind's code paths here)
        "isa_limits": {k: os.environ[k] for k in ISA_LIMITS if k in os.environ},
        "peak": {}, "train": {}, "decode": {}, "encoder": {},
    }
    start = time.perf_counter()
    # The peak is always measured: MFU needs it.
    for name in ("fp32", "bf16"):
        results["peak"][f"{name}_flop_per_s"] = matmul_peak(
            device, DTYPES[name], args.peak_size, args.warmup, args.repeats)
    if "train" in sections:
        bench_train(args, device, results)
    if "decode" in sections:
        bench_decode(args, device, results)
    if "encoder" in sections:
        bench_encoder(args, device, results)
    if "cpu_speed" in sections:
        bench_cpu_speed(args, device, results)
    results["ratios"] = ratios(results, args)
    results["wall_s"] = time.perf_counter() - start
    return results
