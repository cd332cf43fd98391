"""A cell's training in a process of its own (a local worker's, a cluster job): under the
cell's lock, as every process that trains a cell (compare/lock.py), and resuming a run killed in
the cell after the job was prepared, decided there, under the lock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, open_dict

from .cell_log import cell_log
from .lock import LOCK, CellLock
from .status import has_checkpoint


def train_cell(cfg: DictConfig, out: Path, train: Callable[[DictConfig], object]) -> str:
    """train(cfg) for the cell in `out`, its log also in the cell's train.log. Another process
    may work the same grid: a cell it holds is skipped (a job submitted again while the first
    still trains), one it finished meanwhile is not redone. -> what became of the cell:
    "trained", or why it was not."""
    lock = CellLock(out)
    if (holder := lock.try_take()) is not None:
        return f"is being trained by {holder} ({out / LOCK}); skipped here"
    try:
        if (out / "results.json").exists():
            return "was finished by another process meanwhile"
        if not cfg.get("resume") and has_checkpoint(out):
            with open_dict(cfg):
                cfg.resume = str(out)
        with cell_log(out):
            train(cfg)
        return "trained"
    finally:
        lock.release()
