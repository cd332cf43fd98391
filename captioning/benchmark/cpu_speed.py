"""The `cpu_speed` section: each switchable CPU trick (models/cpu_speed) timed on and off,
alternated round by round in this process at the benchmark's shapes, so a drift of the
machine's speed falls on both sides alike. The speed-up is the median round's time without over
the median with; a trick is worth keeping where it reaches 1.05 on some CPU kind."""

from __future__ import annotations

import statistics

import torch

from ..models import build_decoder
from ..models.attention.additive import AdditiveAttention
from ..models.decoders.lstm import LSTMDecoder
from .config import DTYPES
from .sections import autocast, decode_steps, decoder_cfg, timed, train_step


def _alternated(on, off, rounds: int, device: torch.device) -> dict:
    """Both sides' median seconds over `rounds` alternated rounds (each round one timed call
    after one warm-up call) and the speed-up off / on."""
    times: dict[str, list[float]] = {"on_s": [], "off_s": []}
    for _ in range(rounds):
        for key, fn in (("on_s", on), ("off_s", off)):
            times[key].append(timed(fn, 1, 1, device)["median_s"])
    out = {k: statistics.median(v) for k, v in times.items()}
    return {**out, "speedup": out["off_s"] / out["on_s"], "rounds": rounds}


def _switched(obj, attr: str, value: bool, fn):
    """fn run with obj.attr = value, then restored."""
    def run():
        old = getattr(obj, attr, True)  # the switches default to on
        setattr(obj, attr, value)
        try:
            return fn()
        finally:
            setattr(obj, attr, old)
    return run


def bench_cpu_speed(args, device, results) -> None:
    """results["cpu_speed"][trick/where/precision] = _alternated's figures (CPU only)."""
    out = results.setdefault("cpu_speed", {})
    if device.type != "cpu":
        return
    rounds = max(3, args.repeats)
    feats = torch.randn(args.batch, args.grid**2, args.feature_dim)
    tokens = torch.randint(4, args.vocab, (args.batch, args.tokens + 1))
    # both precisions, or the one --precision names (a CPU without bf16 arithmetic emulates it)
    for precision in ("fp32", "bf16") if args.precision == "auto" else (args.precision,):
        dtype = DTYPES[precision]
        torch.manual_seed(0)
        dec = build_decoder(decoder_cfg("lstm", args), args.vocab, args.feature_dim, {"name": "additive"})
        opt = torch.optim.AdamW(dec.parameters(), lr=1e-4, fused=True)
        step = train_step(dec.train(), feats, tokens, opt, dtype, device)
        out[f"step_linear/train/{precision}"] = _alternated(
            _switched(LSTMDecoder, "fused_training_steps", True, step),
            _switched(LSTMDecoder, "fused_training_steps", False, step), rounds, device)
        out[f"half_tanh/train/{precision}"] = _alternated(
            _switched(AdditiveAttention, "tanh_through_sigmoid", True, step),
            _switched(AdditiveAttention, "tanh_through_sigmoid", False, step), rounds, device)
        dec.eval()

        def greedy():
            with autocast(device, dtype):
                decode_steps(dec, feats, args.tokens)

        out[f"packed/greedy/{precision}"] = _alternated(
            _switched(dec, "pack_linears", True, greedy), _switched(dec, "pack_linears", False, greedy),
            rounds, device)
    # Denormal operands: a sharpened attention's weights (1e-40) through the products of its
    # backward, at one step's attention shape (B, N) x (N, value width).
    weights = torch.full((args.batch * args.tokens, args.grid**2), 1e-40)
    values = torch.randn(args.grid**2, args.d_model)

    def denormal_products():
        for _ in range(20):
            (weights * 0.5 + weights).mul_(weights).sum() + (weights @ values).sum()

    def flushed(value: bool):
        def run():
            torch.set_flush_denormal(value)
            try:
                denormal_products()
            finally:
                torch.set_flush_denormal(True)  # configure_cpu's setting
        return run

    out["denormal_flush/products/fp32"] = _alternated(flushed(True), flushed(False), rounds, device)
