"""What a run records of its course, for studies of how fast and how far it learns: every
validation's scores (the learning curve, results.json `val_curve`) and weights-only snapshots at
chosen epochs (`checkpoint.snapshot_epochs`), which train() tests like best.ckpt (`at_epoch`)."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

# The validation scores a curve keeps (of those the module computes: module._score).
CURVE_KEYS = ("bleu4", "cider", "attr_acc", "attn_entropy")


class ValidationCurve(Callback):
    """One entry per validation: epoch (1-based), optimiser step, the rate of the first parameter
    group and the CURVE_KEYS scores of val/*, as computed (float64). Saved in every checkpoint,
    so a resumed run's curve continues the killed run's."""

    def __init__(self, monitor: str = "val/bleu4", smoothing: int = 1) -> None:
        self.curve: list[dict] = []
        # smoothing > 1: each entry also holds the mean of the monitor over the last `smoothing`
        # validations (<monitor>_smooth), put where early stopping reads its monitor
        self.monitor, self.smoothing = monitor, smoothing

    @property
    def smoothed_name(self) -> str:
        return f"{self.monitor}_smooth"

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after the module's on_validation_epoch_end has scored the epoch (callbacks run first)
        scores = getattr(pl_module, "metrics", {}).get("val")
        if trainer.sanity_checking or not scores:
            return
        entry = {"epoch": trainer.current_epoch + 1, "step": trainer.global_step,
                 "lr": trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None}
        entry.update({f"val/{k}": scores[f"val/{k}"] for k in CURVE_KEYS if f"val/{k}" in scores})
        self.curve = [e for e in self.curve if e["epoch"] != entry["epoch"]] + [entry]
        if self.smoothing > 1 and self.monitor in entry:
            recent = [e[self.monitor] for e in self.curve if self.monitor in e][-self.smoothing:]
            entry[self.smoothed_name] = sum(recent) / len(recent)
            # early stopping (after this callback) reads trainer.callback_metrics at this epoch's end
            trainer.callback_metrics[self.smoothed_name] = torch.tensor(
                entry[self.smoothed_name], device=getattr(pl_module, "device", None))

    def best(self, monitor: str, mode: str) -> dict | None:
        """The entry with the best `monitor` score (the earliest of equal ones), or None."""
        scored = [e for e in self.curve if monitor in e]
        if not scored:
            return None
        sign = 1 if mode == "max" else -1
        return max(scored, key=lambda e: (sign * e[monitor], -e["epoch"]))

    def state_dict(self) -> dict:
        return {"curve": self.curve}

    def load_state_dict(self, state_dict: dict) -> None:
        self.curve = list(state_dict.get("curve", []))


def snapshot_path(out: Path, epoch: int) -> Path:
    return out / "checkpoints" / f"epoch{epoch}.ckpt"


class EpochSnapshots(Callback):
    """Weights-only checkpoints at the end of the given epochs (1-based): what the run was after
    a fixed budget, e.g. 2 and 5 epochs, tested after training on the same test split and with
    the same decoding as best.ckpt."""

    def __init__(self, out: Path, epochs: list[int]) -> None:
        self.out, self.epochs = out, sorted(set(epochs))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning calls this after the epoch's validation (if any): the epoch's final weights.
        epoch = trainer.current_epoch + 1
        if epoch in self.epochs:
            trainer.save_checkpoint(snapshot_path(self.out, epoch), weights_only=True)
