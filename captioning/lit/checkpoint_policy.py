"""The checkpoint policy: what is written when, atomically, with everything a resume needs.

Written into <run dir>/checkpoints/ (all full state: model, optimiser, scheduler, loops, data
position, RNG states, callbacks' best score, hparams):
- last.ckpt: every `checkpoint.every_n_steps` optimiser steps and at every epoch end (after
  validation, so it carries that epoch's best score); one file, replaced each time.
- best.ckpt: when `checkpoint.monitor` improves (at validation); one file, replaced each time.
Resume reads the newest intact one of the two (by global step). Writes are atomic (temp file in
the same dir, fsync, rename), so a kill or a full disk leaves the previous file whole.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import Callback, ModelCheckpoint

from ..checkpoint import read_checkpoint
from ..errors import exception_chain

CHECKPOINTS = ("last.ckpt", "best.ckpt")
_UMASK = os.umask(0)
os.umask(_UMASK)  # read once (os.umask can only be read by setting it)


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save into a temp file beside the target, fsync, rename over it, fsync the dir; loads
    through read_checkpoint (weights_only=True, our messages)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                self._write(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a checkpoint is a normal file
            os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
        except BaseException as err:
            Path(tmp).unlink(missing_ok=True)  # e.g. ENOSPC: the previous checkpoint stays
            cause = next((e for e in exception_chain(err) if isinstance(e, OSError) and e.errno), None)
            if cause is None:
                raise
            # torch.save reports a failed write as its own RuntimeError: name the file and the
            # size it needed (errors as faults.py words them)
            fault = OSError(cause.errno, cause.strerror, str(path))
            fault.needed_bytes = _tensor_bytes(checkpoint)
            raise fault from err
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a power cut
        finally:
            os.close(dir_fd)

    @staticmethod
    def _write(checkpoint: dict, f) -> None:
        torch.save(checkpoint, f)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict[str, Any]:
        return read_checkpoint(path, map_location or "cpu")


def _tensor_bytes(obj) -> int:
    """The bytes of every tensor in a (nested) checkpoint: about its size on disk."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


class RNGState(Callback):
    """The global RNG states (python, numpy, torch CPU and CUDA) in every checkpoint, restored on
    resume: dropout after a resume draws what it would have drawn without the crash. (The data
    order has its own seeded generator: data/sampler.py.)"""

    def state_dict(self) -> dict:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        state = {
            "python": random.getstate(),
            # numpy's state as tensors/ints: weights_only loading accepts no numpy arrays
            "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
            "torch": torch.get_rng_state(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["torch.cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict) -> None:
        random.setstate(_tuples(state["python"]))
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
        torch.set_rng_state(state["torch"])
        if "torch.cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["torch.cuda"])


def _tuples(obj):
    """random.setstate needs the nested tuples back (they may come back as lists)."""
    return tuple(_tuples(x) for x in obj) if isinstance(obj, (list, tuple)) else obj


class RunCheckpoint(ModelCheckpoint):
    """ModelCheckpoint that overwrites its one file (no -v1 copies) and, when the run dir was
    moved or copied before a resume, keeps the best score with its paths moved along (Lightning
    would drop the score, and the next validation could overwrite a better best.ckpt)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(auto_insert_metric_name=False, enable_version_counter=False, **kwargs)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old = state_dict.get("dirpath")
        if old and self.dirpath and old != self.dirpath:
            moved = {k: v.replace(old, self.dirpath, 1) if isinstance(v, str) else v
                     for k, v in state_dict.items()}
            moved["best_k_models"] = {k.replace(old, self.dirpath, 1): v
                                      for k, v in state_dict.get("best_k_models", {}).items()}
            state_dict = {**moved, "dirpath": self.dirpath}
        super().load_state_dict(state_dict)


def checkpoint_callbacks(out: Path, cfg: dict) -> list[ModelCheckpoint]:
    """[best by the monitored metric, last every N steps, last at every epoch end], in this
    order: Lightning runs checkpoint callbacks last and in order, so the epoch-end last.ckpt
    holds the best score this epoch's validation just set. (Two callbacks write last.ckpt:
    Lightning's triggers by step and by epoch are mutually exclusive within one.)"""
    ck = cfg.get("checkpoint") or {}
    where = dict(dirpath=str(out / "checkpoints"))
    callbacks = [RunCheckpoint(filename="best", monitor=ck["monitor"],
                               mode=ck["mode"], save_top_k=1, **where)]
    if ck.get("every_n_steps"):
        callbacks.append(RunCheckpoint(filename="last", every_n_train_steps=ck["every_n_steps"],
                                       **where))
    callbacks.append(RunCheckpoint(filename="last", every_n_epochs=1, **where))
    return callbacks


def newest_checkpoint(run_dir: Path) -> tuple[Path, dict]:
    """The intact full-state checkpoint of a run with the highest global step -> (path, dict).
    A damaged file is skipped with a warning; none intact raises FileNotFoundError."""
    found, problems = [], []
    for name in CHECKPOINTS:
        path = run_dir / "checkpoints" / name
        if not path.exists():
            continue
        try:
            found.append((path, read_checkpoint(path)))
        except ValueError as err:
            problems.append(str(err))
    if not found:
        raise FileNotFoundError(
            f"resume: no intact checkpoint in {run_dir / 'checkpoints'}"
            + (" (" + "; ".join(problems) + ")" if problems else
               " (the run stopped before its first checkpoint: start it again without resume)"))
    for problem in problems:
        pl.utilities.rank_zero_warn(f"resume: skipping {problem}")
    return max(found, key=lambda pc: (pc[1].get("global_step", 0), pc[0].name == "last.ckpt"))
