"""Read checkpoints safely, and load a trained model with nothing but its path (torch only).

Every reader of a checkpoint (load_checkpoint, evaluate.py, caption.py, resume, init_from) goes
through `read_checkpoint`: `torch.load(weights_only=True)`, so a file crafted to run code when
unpickled is refused before any of it runs, and every failure names the file and what to do.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path

import torch

from .data.vocab import Vocabulary
from .errors import UserError
from .models.captioner import Captioner, build_captioner
from .schema import completed

FORMAT_VERSION = 1


class CheckpointError(UserError):
    """A file that is not a loadable captioning checkpoint; the message says why and what to do."""


def _who_wrote(ckpt: dict) -> str:
    """'captioning format 1 (PyTorch Lightning 2.6.6)', or what else can be told from the keys."""
    hp = ckpt.get("hyper_parameters") if isinstance(ckpt, dict) else None
    lightning = ckpt.get("pytorch-lightning_version") if isinstance(ckpt, dict) else None
    if isinstance(hp, dict) and "format_version" in hp:
        return f"captioning format {hp['format_version']}" + (
            f" (PyTorch Lightning {lightning})" if lightning else "")
    if lightning:
        return f"PyTorch Lightning {lightning}, but not by captioning (no format_version)"
    if isinstance(ckpt, dict) and ckpt and all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        return (f"a bare state_dict of {len(ckpt)} tensors (e.g. {next(iter(ckpt))!r}), such as "
                "torchvision weights, not a training checkpoint")
    return f"an unknown program (top-level {type(ckpt).__name__})"


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """The checkpoint dict of a `*.ckpt` written by train(), loaded with weights_only=True.

    Raises FileNotFoundError for a missing path and CheckpointError (a ValueError) for an empty,
    truncated, foreign or code-carrying file, each with a message naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"checkpoint not found: {path} (a run writes <run dir>/checkpoints/best.ckpt and "
            "last.ckpt)")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"{path} is empty (0 bytes): a write that never happened or a "
                              "full disk. Use the run's other checkpoint (best.ckpt/last.ckpt).")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{path} ({size} bytes) is not a PyTorch checkpoint (torch.save writes a zip "
            "archive): truncated by a crash or a full disk, or another kind of file. Use the "
            "run's other checkpoint (best.ckpt/last.ckpt).")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's own text suggests weights_only=False: exactly what must never be done with a
        # file like this, so the message is ours. The offending global names the payload.
        culprit = re.search(r"GLOBAL ([\w.]+)", str(err))
        raise CheckpointError(
            f"refused to load {path}: it references Python code"
            + (f" ({culprit.group(1)})" if culprit else "")
            + " that would run when unpickled. captioning checkpoints hold only tensors and "
            "plain data, so this file was not written by captioning or has been tampered "
            "with; nothing in it was executed. Do not load it.") from None
    except (RuntimeError, EOFError, OSError) as err:
        raise CheckpointError(
            f"{path} ({size} bytes) cannot be read as a checkpoint ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'}): most likely truncated "
            "by a crash or a full disk. Use the run's other checkpoint (best.ckpt/last.ckpt)."
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} was written by {_who_wrote(ckpt)}; captioning needs a "
                              "checkpoint written by train.py (<run dir>/checkpoints/*.ckpt).")
    return ckpt


def checkpoint_config(ckpt: dict, path: str | Path) -> tuple[dict, list[str]]:
    """(resolved run config, vocabulary) of a checkpoint dict, or CheckpointError naming `path`."""
    hp = ckpt.get("hyper_parameters", {})
    version = hp.get("format_version")
    if version != FORMAT_VERSION or "cfg" not in hp or "vocab" not in hp:
        raise CheckpointError(
            f"{path} was written by {_who_wrote(ckpt)}; this code reads captioning format "
            f"{FORMAT_VERSION}. Re-train, or load it with the version of captioning that wrote it.")
    # A run saved before a setting existed reads it at its default (the schemas').
    return completed(hp["cfg"]), hp["vocab"]


def model_state(ckpt: dict) -> dict:
    """The Captioner's state dict inside a training checkpoint (the LightningModule's keys carry
    a `model.` prefix)."""
    return {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> tuple[Captioner, Vocabulary, dict]:
    """(model in eval mode, vocabulary, resolved config) from a `*.ckpt` written by train().
    The config's trainer.precision is the one the run trained in (`auto` resolved, where the
    checkpoint records it): what decoding it the way its test stage did needs."""
    ckpt = read_checkpoint(path, map_location)
    cfg, vocab = checkpoint_config(ckpt, path)
    if ckpt.get("train_precision"):
        cfg["trainer"]["precision"] = ckpt["train_precision"]
    model = build_captioner(cfg, len(vocab))
    model.load_state_dict(model_state(ckpt))
    return model.eval(), Vocabulary(vocab), cfg


# What a model's raw features depend on: members of an ensemble must agree on all of it, since
# they are decoded from one batch of features.
FEATURE_KEYS = ("name", "pretrained", "weights_path", "init_seed", "image_size", "finetune")


def load_ensemble(paths: list[str | Path], map_location: str = "cpu") -> tuple[Captioner, Vocabulary, dict]:
    """(models.ensemble.Ensemble of the checkpoints, the shared vocabulary, the first one's
    config). One path: that model itself. Members must share the vocabulary and the feature
    setting (FEATURE_KEYS of `encoder`, and data.blind): a UserError names the checkpoint and
    the setting that differs."""
    from .models.ensemble import Ensemble

    if len(paths) == 1:
        return load_checkpoint(paths[0], map_location)
    loaded = [load_checkpoint(p, map_location) for p in paths]
    _, vocab, cfg = loaded[0]
    for path, (model, other_vocab, other) in zip(paths[1:], loaded[1:]):
        if other_vocab.itos != vocab.itos:
            raise UserError(f"ensemble: {path} has another vocabulary than {paths[0]} "
                             f"({len(other_vocab)} against {len(vocab)} words): members must be "
                             "trained on the same data and vocabulary")
        for key in FEATURE_KEYS:
            if other["encoder"].get(key) != cfg["encoder"].get(key):
                raise UserError(f"ensemble: {path} has encoder.{key}={other['encoder'].get(key)!r}, "
                                 f"{paths[0]} has {cfg['encoder'].get(key)!r}: members are decoded "
                                 "from the same features, so their feature settings must agree")
        if bool(other["data"].get("blind")) != bool(cfg["data"].get("blind")):
            raise UserError(f"ensemble: {path} and {paths[0]} differ in data.blind")
        if other["encoder"].get("finetune"):
            raise UserError(f"ensemble: {path} fine-tuned its encoder (encoder.finetune=true): its "
                            "features are its own, not the frozen store's; ensembles take "
                            "frozen-encoder runs")
    return Ensemble([m for m, _, _ in loaded]).eval(), vocab, cfg
