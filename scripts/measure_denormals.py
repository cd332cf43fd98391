"""Does a trained model's CPU training step slow down on denormal floats, and how much does
flushing them (captioning/device.py, on at every entry point) give back?

    python scripts/measure_denormals.py outputs/train/runs/<run>/checkpoints/last.ckpt \\
        --features data/cache/<store>/features.npy

Runs the same training step (forward, backward, AdamW with the checkpoint's optimizer state,
24 images x 5 random captions) in two fresh processes, flushing on and off, set before torch
starts its threads as the entry points do; prints the median step time of each and the ratio.
A freshly initialised model has few denormals; they come as the model sharpens (attention
collapsing onto one cell, a confident vocabulary), so point it at a checkpoint from late in a run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from captioning.errors import ArgumentParser, report_user_errors


def step_time(checkpoint: str, features: str | None, flush: bool, steps: int) -> float:
    """In this process: the median training step (s) with denormals flushed or not."""
    import torch

    torch.set_flush_denormal(flush)  # before any parallel op: the threads copy it
    import numpy as np

    from captioning import load_checkpoint

    torch.manual_seed(0)
    model, vocab, cfg = load_checkpoint(checkpoint)
    model.train()
    if features:  # real raw features (images, cells, channels) from a feature store
        raw = torch.from_numpy(np.load(features, mmap_mode="r")[:24].astype(np.float32))
    else:
        raw = torch.randn(24, 16, model.normalizer.mean.numel())  # (images, 4x4 cells, channels)
    tokens = torch.randint(4, len(vocab), (120, 16))  # (B, T)
    tokens[:, 0] = vocab.bos
    image_index, lengths = torch.arange(24).repeat_interleave(5), torch.full((120,), 15)
    opt = torch.optim.AdamW(model.parameters())
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    opt.load_state_dict(state["optimizer_states"][0])  # Adam's moments as training left them
    times = []
    for _ in range(steps + 1):  # the first step warms up
        start = time.perf_counter()
        logits, _ = model(raw, tokens[:, :-1], lengths, image_index)  # (B, T-1, V)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:]))


@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main(argv: list[str] | None = None) -> dict:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--features", default=None, help="a features.npy (default: random features)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeats", type=int, default=2, help="process pairs, alternating off and on")
    p.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(step_time(args.checkpoint, args.features, args.child == "on", args.steps)))
        return {}
    for path in (args.checkpoint, args.features):  # before any process starts
        if path and not Path(path).is_file():
            raise FileNotFoundError(f"no such file: {path}")
    out = {"off": [], "on": []}
    for _ in range(args.repeats):
        for mode in ("off", "on"):
            cmd = [sys.executable, __file__, args.checkpoint, "--steps", str(args.steps), "--child", mode]
            cmd += ["--features", args.features] if args.features else []
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:  # e.g. a checkpoint without optimizer state: say why, not just "failed"
                raise SystemExit(f"the flush-{mode} process failed:\n{done.stderr[-2000:]}")
            out[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    off, on = statistics.median_high(out["off"]), statistics.median_high(out["on"])
    print(f"median training step: denormals kept {off:.3f} s, flushed {on:.3f} s: {off / on:.2f}x "
          f"(each process: {out})")
    return {**out, "ratio": off / on}


if __name__ == "__main__":
    main()
