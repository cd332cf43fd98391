"""Load a training checkpoint with nothing but its path (torch only, weights_only=True)."""

from __future__ import annotations

from pathlib import Path

import torch

from .data.vocab import Vocabulary
from .models.captioner import Captioner, build_captioner

FORMAT_VERSION = 1


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> tuple[Captioner, Vocabulary, dict]:
    """(model in eval mode, vocabulary, resolved config) from a `*.ckpt` written by train()."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path} (runs write <run>/checkpoints/best.ckpt)")
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    hp = ckpt.get("hyper_parameters", {})
    version = hp.get("format_version")
    if version != FORMAT_VERSION or "cfg" not in hp or "vocab" not in hp:
        raise ValueError(
            f"{path}: checkpoint format {version!r} is not supported (this code reads format "
            f"{FORMAT_VERSION}); re-train, or load it with the version of captioning that wrote it"
        )
    cfg, vocab = hp["cfg"], Vocabulary(hp["vocab"])
    model = build_captioner(cfg, len(vocab))
    state = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}
    model.load_state_dict(state)
    return model.eval(), vocab, cfg
