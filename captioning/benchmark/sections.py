"""The timed sections: matmul peak, decoder training steps, decoding, feature extraction."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..models import beam_search, build_decoder, greedy_decode
from ..models.cpu_speed.packed import available as packed_available
from ..models.losses import cross_entropy
from ..models.refiner import REFINERS
from ..schema.fields import defaults
from ..schema.model import Model, ResNet
from .config import DTYPES


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
    """One optimisation step: forward (teacher forcing), cross-entropy, backward, AdamW. feats
    (I, N, D), tokens (B, T + 1): B a multiple of I, caption b of image b // (B / I)."""
    lengths = torch.full((tokens.shape[0],), tokens.shape[1] - 1, device=device)
    per_image = tokens.shape[0] // feats.shape[0]
    image_index = torch.arange(feats.shape[0], device=device).repeat_interleave(per_image)

    def step():
        with autocast(device, dtype):
            logits, _ = dec(feats, tokens[:, :-1], None, lengths, image_index)  # (B, T, V)
        loss = cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())  # training's loss
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
    captions = args.batch * args.captions_per_image  # a step's captions, batch images'
    tokens = torch.randint(4, args.vocab, (captions, args.tokens + 1), device=device)
    default = results["default_precision"]
    for name in args.decoder_list:
        for mode in args.mode_list:
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
                opt = torch.optim.AdamW(dec.parameters(), lr=1e-4, fused=True)  # fused, as training
                step = train_step(dec, feats, tokens, opt, DTYPES[precision], device)
                t = timed(step, args.warmup, args.repeats if not naive else max(1, args.repeats // 2),
                          device)
                t["captions_per_s"] = captions / t["median_s"]
                if mode in ("additive", "dot"):
                    t["flops_per_step"] = step_flops(step)
                    t["flop_per_s"] = t["flops_per_step"] / t["median_s"]
                    t["mfu"] = t["flop_per_s"] / results["peak"][f"{precision}_flop_per_s"]
                out[f"{name}/{mode}/{precision}{'/naive' if naive else ''}"] = t
        for refiner in args.refiner_list:  # its cost: additive with the refiner in front
            torch.manual_seed(0)
            model = defaults(Model)  # the refiner's settings but its width
            dec = Refined(REFINERS[refiner](args.feature_dim, layers=model["refiner_layers"],
                                            dim=args.d_model, heads=model["refiner_heads"]),
                          build_decoder(decoder_cfg(name, args), args.vocab, args.feature_dim,
                                        {"name": "additive"})).to(device).train()
            opt = torch.optim.AdamW(dec.parameters(), lr=1e-4, fused=True)
            t = timed(train_step(dec, feats, tokens, opt, DTYPES[default], device), args.warmup,
                      args.repeats, device)
            t["captions_per_s"] = captions / t["median_s"]
            out[f"{name}/additive+{refiner}/{default}"] = t


class Refined(torch.nn.Module):
    """A refiner in front of a decoder, called like the decoder (features first)."""

    def __init__(self, refiner: torch.nn.Module, decoder: torch.nn.Module) -> None:
        super().__init__()
        self.refiner, self.decoder = refiner, decoder

    def forward(self, features, *args, **kwargs):
        return self.decoder(self.refiner(features), *args, **kwargs)


def decode_steps(decoder, features: torch.Tensor, steps: int, bos: int = 1) -> torch.Tensor:
    """The project's greedy decoding of exactly `steps` tokens: its <eos> is an id no step
    emits (-1), so no caption ends early and every run does the same work."""
    return greedy_decode(decoder, features, bos, -1, steps)[0]


def bench_decode(args, device, results) -> None:
    out = results["decode"]
    dtype = DTYPES[results["default_precision"]]
    features = torch.randn(args.batch, args.grid**2, args.feature_dim, device=device)
    beam_feats = torch.randn(args.beam_batch, args.grid**2, args.feature_dim, device=device)
    for name in args.decoder_list:
        torch.manual_seed(0)
        dec = build_decoder(decoder_cfg(name, args), args.vocab, args.feature_dim,
                            {"name": args.attention}).to(device).eval()
        variants = [("", {}), ("_naive", {"prepare_once": False})]
        if name == "transformer":
            variants.append(("_nocache", {"use_cache": False}))
        if device.type == "cpu" and packed_available():  # weights packed once per search or per token
            variants.append(("_unpacked", {"pack_linears": False}))
        for suffix, attrs in variants:
            for key, value in attrs.items():
                setattr(dec, key, value)
            with autocast(device, dtype):
                t = timed(lambda: decode_steps(dec, features, args.tokens), args.warmup,
                          args.repeats, device)
            t["images_per_s"] = args.batch / t["median_s"]
            out[f"greedy_{name}{suffix}"] = t
            for key in attrs:  # back to the defaults (every flag defaults to True)
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
        from ..data.features import extract_features, extraction_dtype
        from ..data.images import ImageFiles
        from ..models import build_encoder
    except ImportError as err:  # torchvision or PIL missing: the other sections still count
        results["encoder"] = {"skipped": f"needs torchvision and PIL ({err})"}
        return
    encoder = build_encoder({**defaults(ResNet), "name": args.encoder})
    encoder = encoder.eval().to(device).to(memory_format=torch.channels_last)
    dtype = extraction_dtype(device)
    with tempfile.TemporaryDirectory() as tmp:
        jpegs = ImageFiles(_jpegs(Path(tmp), args.encoder_images), args.image_size)
        # Every batch is extracted (and dropped): the loop the feature store runs, minus writes.
        files = timed(lambda: sum(len(f) for f, _ in extract_features(
            encoder, jpegs, args.encoder_batch, args.encoder_workers, device)), 0, args.repeats, device)
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
