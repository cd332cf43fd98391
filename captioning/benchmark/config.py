"""What the benchmark measures: its settings, one dataclass (the command line is built from it)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from ..models import ATTENTIONS

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class BenchConfig:
    """What to measure; each field is also a `--flag` of scripts/benchmark.py (help = metadata)."""

    sections: str = field(default="peak,train,decode,encoder", metadata={"help": "comma-separated"})
    batch: int = field(default=64, metadata={"help": "captions (train) / images (greedy)"})
    captions_per_image: int = field(default=1, metadata={
        "help": "training: captions per image; a step trains batch x this captions of batch images, "
                "each image's keys made once, as training on 5 references does (a peer's spi5)"})
    grid: int = field(default=7, metadata={"help": "feature grid side (N = grid^2)"})
    feature_dim: int = 2048
    d_model: int = field(default=512, metadata={"help": "LSTM embed/hidden/value and Transformer width"})
    layers: int = field(default=2, metadata={"help": "Transformer layers"})
    vocab: int = 10000
    tokens: int = 20
    decoders: str = "lstm,transformer"
    modes: str = field(default=",".join(ATTENTIONS.names()), metadata={"help": "attention modes to train"})
    attention: str = field(default="additive", metadata={"help": "attention mode for decoding"})
    refiners: str = field(default="self_attention", metadata={
        "help": "key-side refiners (model.refiner) to train in front of additive attention"})
    beam: int = 5
    beam_batch: int = field(default=64, metadata={"help": "images for the beam comparison"})
    encoder: str = "resnet50"
    image_size: int = 224
    encoder_images: int = field(
        default=160, metadata={"help": "enough that the loader worker's start-up is amortised"})
    encoder_batch: int = 32
    encoder_workers: int = field(default=1, metadata={"help": "loader workers (project default 1)"})
    peak_size: int = 2048
    no_naive: bool = field(default=False, metadata={"help": "skip the naive training baseline"})
    repeats: int = 3
    warmup: int = 1
    threads: int | None = field(default=None, metadata={"help": "torch threads (default: torch's)"})
    device: str = field(default="auto", metadata={"help": "auto = cuda when available, else cpu"})
    precision: str = field(default="auto", metadata={
        "help": "default precision: auto (bf16 on a GPU; on a CPU what its decoder matmuls "
                "measured faster: models/precision_choice.py), fp32, bf16, fp16"})

    def __post_init__(self) -> None:
        if self.precision not in ("auto", *DTYPES):
            raise ValueError(f"precision must be auto or one of {', '.join(DTYPES)}, got '{self.precision}'")
        unknown = set(self.modes.split(",")) - set(ATTENTIONS) - {""}
        if unknown:
            ATTENTIONS[sorted(unknown)[0]]  # raises the registry's "unknown attention" message

    @property
    def decoder_list(self) -> list[str]:
        return [d for d in self.decoders.split(",") if d]

    @property
    def refiner_list(self) -> list[str]:
        return [r for r in self.refiners.split(",") if r]

    @property
    def mode_list(self) -> list[str]:
        return [m for m in self.modes.split(",") if m]


def config_fields() -> list:
    """The dataclass fields, for building a command line from them."""
    return list(fields(BenchConfig))
