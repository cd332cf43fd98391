"""Decoding throughput on synthetic tensors (torch + captioning.models only: runs anywhere torch does).

    python scripts/benchmark.py                       # defaults: batch 32, 7x7x2048 grid, 20 tokens
    python scripts/benchmark.py --json out.json --threads 2

Measures greedy decoding of a fixed number of tokens (no early stop) for the LSTM and the
Transformer decoder, and the Transformer with its key/value cache switched off (the whole prefix
re-run every step): ratios come from one process, so they survive a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from captioning.models import beam_search, build_decoder


@torch.no_grad()
def decode_steps(decoder, features: torch.Tensor, steps: int, bos: int = 1) -> torch.Tensor:
    """Greedy decoding of exactly `steps` tokens through the decoder API."""
    state = decoder.init_state(decoder.prepare(features), features)
    tokens = torch.full((features.shape[0],), bos, dtype=torch.long, device=features.device)
    out = []
    for _ in range(steps):
        logits, state, _ = decoder.step(tokens, state)
        tokens = logits.argmax(-1)
        out.append(tokens)
    return torch.stack(out, 1)


def timed(fn, warmup: int, repeats: int) -> dict:
    """Median and spread of wall time over repeats, after warm-up."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--grid", type=int, default=7, help="feature grid side (N = grid^2)")
    p.add_argument("--feature-dim", type=int, default=2048)
    p.add_argument("--d-model", type=int, default=512, help="LSTM embed/hidden and Transformer width")
    p.add_argument("--layers", type=int, default=2, help="Transformer layers")
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--attention", default="additive")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--beam-batch", type=int, default=64, help="images for the beam comparison")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    features = torch.randn(args.batch, args.grid**2, args.feature_dim, device=device)
    attention = {"name": args.attention}
    decoders = {
        "lstm": {"name": "lstm", "embed_dim": args.d_model, "hidden_dim": args.d_model},
        "transformer": {"name": "transformer", "d_model": args.d_model, "num_layers": args.layers},
    }
    results = {"config": vars(args), "threads": torch.get_num_threads(), "decode": {}}
    for name, cfg in decoders.items():
        dec = build_decoder(cfg, args.vocab, args.feature_dim, attention).to(device).eval()
        variants = [("", True)] + ([("_nocache", False)] if name == "transformer" else [])
        for suffix, cache in variants:
            if name == "transformer":
                dec.use_cache = cache
            t = timed(lambda: decode_steps(dec, features, args.tokens), args.warmup, args.repeats)
            t["images_per_s"] = args.batch / t["median_s"]
            results["decode"][f"greedy_{name}{suffix}"] = t
        if name == "transformer":
            dec.use_cache = True  # beam search below runs the default (cached) path
        # Beam search: one batched call vs the same function once per image. <eos> is banned so
        # every hypothesis runs the full length and both sides do the same number of steps.
        beam_feats = torch.randn(args.beam_batch, args.grid**2, args.feature_dim, device=device)
        search = lambda f: beam_search(dec, f, 1, 2, args.beam, args.tokens, banned=(2,))  # noqa: E731
        batched = timed(lambda: search(beam_feats), args.warmup, args.repeats)
        one_by_one = timed(
            lambda: [search(beam_feats[i : i + 1]) for i in range(args.beam_batch)], 0, 1
        )
        tag = f"beam{args.beam}_{name}"
        for key, t in ((tag, batched), (f"{tag}_per_image", one_by_one)):
            t["images_per_s"] = args.beam_batch / t["median_s"]
            results["decode"][key] = t
        results[f"beam_batching_speedup_{name}"] = one_by_one["median_s"] / batched["median_s"]
    d = results["decode"]
    results["transformer_cache_speedup"] = (
        d["greedy_transformer_nocache"]["median_s"] / d["greedy_transformer"]["median_s"]
    )
    head = f"decoding ({args.tokens} tokens, batch {args.batch}, beam batch {args.beam_batch})"
    print(f"| {head} | images/s | median s |")
    print("|---|---:|---:|")
    for key, t in d.items():
        print(f"| {key} | {t['images_per_s']:.1f} | {t['median_s']:.3f} |")
    print(f"Transformer cache speed-up: {results['transformer_cache_speedup']:.2f}x")
    for name in decoders:
        print(f"Beam {args.beam} batched vs per image ({name}): "
              f"{results[f'beam_batching_speedup_{name}']:.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
