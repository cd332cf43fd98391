"""Speed on synthetic tensors. Imports torch and captioning.models only (the encoder section also
needs torchvision and PIL), so it runs on any machine with PyTorch: no Hydra, Lightning, wandb, nltk.

    python scripts/benchmark.py --threads 2 --json bench.json --markdown bench.md
    python scripts/benchmark.py --sections train --modes additive,dot --decoders lstm

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

Every figure is the median of --repeats timed runs after --warmup; speed-ups are ratios of
figures measured in this one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from captioning.models import ATTENTIONS, beam_search, build_decoder
from captioning.models.encoder import best_cpu_dtype

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, warmup: int, repeats: int, device: torch.device) -> dict:
    """Median and spread of wall time over repeats, after warm-up."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def autocast(device: torch.device, dtype: torch.dtype):
    return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, warmup: int, repeats: int) -> float:
    """FLOP/s of an n x n x n matmul: what this machine's matmul units sustain."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    t = timed(lambda: a @ b, warmup, repeats, device)
    return 2 * n**3 / t["median_s"]


def decoder_cfg(name: str, args) -> dict:
    if name == "lstm":
        return {"name": "lstm", "embed_dim": args.d_model, "hidden_dim": args.d_model,
                "value_dim": args.d_model}
    return {"name": "transformer", "d_model": args.d_model, "num_layers": args.layers,
            "ff_dim": 2 * args.d_model}


def train_step(dec, feats, tokens, opt, dtype, device):
    """One optimisation step: forward (teacher forcing), cross-entropy, backward, AdamW."""
    lengths = torch.full((tokens.shape[0],), tokens.shape[1] - 1, device=device)

    def step():
        with autocast(device, dtype):
            logits, _ = dec(feats, tokens[:, :-1], None, lengths)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def step_flops(step) -> int:
    """FLOPs of one step (matmuls and convolutions, forward + backward) by torch's counter."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def bench_train(args, device, results) -> None:
    out = results["train"]
    feats = torch.randn(args.batch, args.grid**2, args.feature_dim, device=device)
    tokens = torch.randint(4, args.vocab, (args.batch, args.tokens + 1), device=device)
    default = results["default_precision"]
    for name in args.decoders:
        for mode in args.modes:
            # Precisions to measure: the default for every mode; fp32 and bf16, fast and
            # naive, for additive (the acceptance pair) and dot (the ratio the claim is about).
            runs = [(default, False)]
            if mode == "additive":
                naives = (False,) if args.no_naive else (False, True)
                runs = [(p, naive) for p in ("fp32", "bf16") for naive in naives]
                if name == "transformer":  # training prepares keys once per forward anyway
                    runs = [(p, False) for p in ("fp32", "bf16")]
            elif mode == "dot":
                runs = [(p, False) for p in ("fp32", "bf16")]
            for precision, naive in runs:
                torch.manual_seed(0)
                dec = build_decoder(decoder_cfg(name, args), args.vocab, args.feature_dim,
                                    {"name": mode}).to(device).train()
                dec.prepare_once = not naive
                opt = torch.optim.AdamW(dec.parameters(), lr=1e-4, fused=True)  # as conf/train.yaml
                step = train_step(dec, feats, tokens, opt, DTYPES[precision], device)
                t = timed(step, args.warmup, args.repeats if not naive else max(1, args.repeats // 2),
                          device)
                t["captions_per_s"] = args.batch / t["median_s"]
                if mode in ("additive", "dot"):
                    t["flops_per_step"] = step_flops(step)
                    t["flop_per_s"] = t["flops_per_step"] / t["median_s"]
                    t["mfu"] = t["flop_per_s"] / results["peak"][f"{precision}_flop_per_s"]
                out[f"{name}/{mode}/{precision}{'/naive' if naive else ''}"] = t


@torch.no_grad()
def decode_steps(decoder, features: torch.Tensor, steps: int, bos: int = 1) -> torch.Tensor:
    """Greedy decoding of exactly `steps` tokens through the decoder API (no early stop)."""
    state = decoder.init_state(decoder.prepare(features), features)
    tokens = torch.full((features.shape[0],), bos, dtype=torch.long, device=features.device)
    out = []
    for _ in range(steps):
        logits, state, _ = decoder.step(tokens, state)
        tokens = logits.argmax(-1)
        out.append(tokens)
    return torch.stack(out, 1)


def bench_decode(args, device, results) -> None:
    out = results["decode"]
    dtype = DTYPES[results["default_precision"]]
    features = torch.randn(args.batch, args.grid**2, args.feature_dim, device=device)
    beam_feats = torch.randn(args.beam_batch, args.grid**2, args.feature_dim, device=device)
    for name in args.decoders:
        torch.manual_seed(0)
        dec = build_decoder(decoder_cfg(name, args), args.vocab, args.feature_dim,
                            {"name": args.attention}).to(device).eval()
        variants = [("", {}), ("_naive", {"prepare_once": False})]
        if name == "transformer":
            variants.append(("_nocache", {"use_cache": False}))
        for suffix, attrs in variants:
            for key, value in attrs.items():
                setattr(dec, key, value)
            with autocast(device, dtype):
                t = timed(lambda: decode_steps(dec, features, args.tokens), args.warmup,
                          args.repeats, device)
            t["images_per_s"] = args.batch / t["median_s"]
            out[f"greedy_{name}{suffix}"] = t
            for key in attrs:  # back to the defaults (both flags default to True)
                setattr(dec, key, True)
        # Beam search: one batched call vs the same function once per image. <eos> is banned,
        # so every hypothesis runs the full length and both sides do the same steps.
        def search(f):
            return beam_search(dec, f, 1, 2, args.beam, args.tokens, banned=(2,))

        with autocast(device, dtype):
            batched = timed(lambda: search(beam_feats), args.warmup, args.repeats, device)
            per_image = timed(lambda: [search(beam_feats[i : i + 1]) for i in range(args.beam_batch)],
                              0, 1, device)
        tag = f"beam{args.beam}_{name}"
        for key, t in ((tag, batched), (f"{tag}_per_image", per_image)):
            t["images_per_s"] = args.beam_batch / t["median_s"]
            out[key] = t


def _jpegs(folder: Path, count: int, width: int = 500, height: int = 375) -> list[Path]:
    """Smooth random photographs-to-be (Flickr-sized JPEGs): upsampled noise, quality 90."""
    from PIL import Image

    gen = torch.Generator().manual_seed(0)
    paths = []
    for i in range(count):
        small = torch.rand(3, 12, 16, generator=gen)
        big = F.interpolate(small[None], size=(height, width), mode="bicubic")[0].clamp(0, 1)
        array = (big.permute(1, 2, 0) * 255).to(torch.uint8).numpy()
        paths.append(folder / f"{i:04d}.jpg")
        Image.fromarray(array).save(paths[-1], quality=90)
    return paths


def bench_encoder(args, device, results) -> None:
    try:
        from captioning.data.features import extract_features
        from captioning.models import ResNetEncoder
    except ImportError as err:  # torchvision or PIL missing: the other sections still count
        results["encoder"] = {"skipped": f"needs torchvision and PIL ({err})"}
        return
    encoder = ResNetEncoder(args.encoder).eval().to(device).to(memory_format=torch.channels_last)
    dtype = best_cpu_dtype() if device.type == "cpu" else torch.bfloat16
    with tempfile.TemporaryDirectory() as tmp:
        paths = _jpegs(Path(tmp), args.encoder_images)
        files = timed(lambda: extract_features(encoder, paths, args.image_size, args.encoder_batch,
                                               args.encoder_workers, device), 0, args.repeats, device)
    images = torch.rand(args.encoder_batch, 3, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=torch.channels_last)

    @torch.inference_mode()
    def bare():
        for _ in range(0, args.encoder_images, args.encoder_batch):
            with autocast(device, dtype):
                encoder(images)

    model = timed(bare, 1, args.repeats, device)
    for key, t in (("from_files", files), ("bare_forward", model)):
        t["images_per_s"] = args.encoder_images / t["median_s"]
        results["encoder"][key] = t
    results["encoder"]["dtype"] = str(dtype)


def ratios(results: dict, args) -> dict:
    """The speed-ups, each a ratio of two figures from this process."""
    tr, de, r = results["train"], results["decode"], {}
    cps = {k: v["captions_per_s"] for k, v in tr.items()}

    def faster(table: dict, slow: str, fast: str) -> float:  # median time slow / fast
        return table[slow]["median_s"] / table[fast]["median_s"]

    if "lstm/additive/fp32/naive" in cps:
        naive32 = cps["lstm/additive/fp32/naive"]
        r["train_lstm_additive_fp32_vs_naive_fp32"] = cps["lstm/additive/fp32"] / naive32
        r["train_lstm_additive_bf16_vs_naive_bf16"] = (
            cps["lstm/additive/bf16"] / cps["lstm/additive/bf16/naive"])
        best = cps[f"lstm/additive/{results['default_precision']}"]
        r["train_lstm_additive_default_vs_naive_fp32"] = best / naive32
        r["train_lstm_additive_bf16_vs_fp32"] = cps["lstm/additive/bf16"] / cps["lstm/additive/fp32"]
    for name in args.decoders:
        for p in ("fp32", "bf16"):
            dot, additive = f"{name}/dot/{p}", f"{name}/additive/{p}"
            if dot in cps and additive in cps:
                r[f"train_{name}_dot_over_additive_{p}"] = cps[dot] / cps[additive]
        if f"greedy_{name}" in de:
            r[f"greedy_{name}_vs_naive"] = faster(de, f"greedy_{name}_naive", f"greedy_{name}")
            tag = f"beam{args.beam}_{name}"
            r[f"beam_batched_vs_per_image_{name}"] = faster(de, f"{tag}_per_image", tag)
    if "greedy_transformer_nocache" in de:
        r["transformer_cache_speedup"] = faster(de, "greedy_transformer_nocache", "greedy_transformer")
    enc = results.get("encoder", {})
    if "from_files" in enc:
        r["encoder_files_vs_bare"] = (
            enc["from_files"]["images_per_s"] / enc["bare_forward"]["images_per_s"])
    return r


def markdown(results: dict) -> str:
    c = results["config"]
    lines = [f"Shapes: batch {c['batch']}, {c['grid']}x{c['grid']}x{c['feature_dim']} features, "
             f"width {c['d_model']}, vocabulary {c['vocab']}, {c['tokens']} tokens; "
             f"{results['threads']} threads on {results['device']}; default precision "
             f"{results['default_precision']}.", ""]
    peak = results["peak"]
    lines += ["| matmul peak | TFLOP/s |", "|---|---:|"]
    lines += [f"| {k.split('_')[0]} | {v / 1e12:.3f} |" for k, v in peak.items()]
    if results["train"]:
        lines += ["", "| training step (fwd+bwd+AdamW) | captions/s | median s | spread s | MFU |",
                  "|---|---:|---:|---:|---:|"]
        for k, t in results["train"].items():
            mfu = f"{t['mfu']:.0%}" if "mfu" in t else ""
            lines.append(f"| {k} | {t['captions_per_s']:.1f} | {t['median_s']:.3f} | "
                         f"{t['min_s']:.3f}-{t['max_s']:.3f} | {mfu} |")
    if results["decode"]:
        lines += ["", "| decoding | images/s | median s | spread s |", "|---|---:|---:|---:|"]
        for k, t in results["decode"].items():
            lines.append(f"| {k} | {t['images_per_s']:.1f} | {t['median_s']:.3f} | "
                         f"{t['min_s']:.3f}-{t['max_s']:.3f} |")
    enc = results.get("encoder", {})
    if "from_files" in enc:
        head = f"encoder ({c['encoder']}, {c['image_size']} px, {enc['dtype']})"
        lines += ["", f"| {head} | images/s | median s |", "|---|---:|---:|"]
        for k in ("from_files", "bare_forward"):
            lines.append(f"| {k} | {enc[k]['images_per_s']:.1f} | {enc[k]['median_s']:.3f} |")
    lines += ["", "| ratio | x |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in results["ratios"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default="peak,train,decode,encoder")
    p.add_argument("--batch", type=int, default=64, help="captions (train) / images (greedy)")
    p.add_argument("--grid", type=int, default=7, help="feature grid side (N = grid^2)")
    p.add_argument("--feature-dim", type=int, default=2048)
    p.add_argument("--d-model", type=int, default=512, help="LSTM embed/hidden/value and Transformer width")
    p.add_argument("--layers", type=int, default=2, help="Transformer layers")
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--decoders", default="lstm,transformer")
    p.add_argument("--modes", default=",".join(sorted(ATTENTIONS)), help="attention modes to train")
    p.add_argument("--attention", default="additive", help="attention mode for decoding")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--beam-batch", type=int, default=64, help="images for the beam comparison")
    p.add_argument("--encoder", default="resnet50")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--encoder-images", type=int, default=160,
                   help="enough that the loader worker's start-up is amortised, as in real use")
    p.add_argument("--encoder-batch", type=int, default=32)
    p.add_argument("--encoder-workers", type=int, default=1, help="loader workers (project default 1)")
    p.add_argument("--peak-size", type=int, default=2048)
    p.add_argument("--no-naive", action="store_true", help="skip the naive training baseline")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", default="auto", choices=["auto", *DTYPES],
                   help="default precision (auto: bf16 on GPU and AMX CPUs, else fp32)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--markdown", default=None, help="write the tables here")
    args = p.parse_args(argv)
    args.decoders = [d for d in args.decoders.split(",") if d]
    args.modes = [m for m in args.modes.split(",") if m]
    sections = set(args.sections.split(","))
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    precision = args.precision
    if precision == "auto":
        auto = best_cpu_dtype() if device.type == "cpu" else torch.bfloat16
        precision = next(k for k, v in DTYPES.items() if v == auto)
    results = {
        "config": {k: v for k, v in vars(args).items()}, "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "default_precision": precision,
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
    results["ratios"] = ratios(results, args)
    results["wall_s"] = time.perf_counter() - start
    table = markdown(results)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(table)
    return results


if __name__ == "__main__":
    main()
