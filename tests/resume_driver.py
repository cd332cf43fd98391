"""A tiny training run in its own process, for tests/test_resume.py to kill and resume.

    python tests/resume_driver.py <out dir> <data dir> <steps log> [overrides...]
    torchrun --nproc_per_node 2 tests/resume_driver.py ... trainer=ddp trainer.accelerator=cpu

Appends one JSON line per training step to <steps log> (the step, the epoch and the image
indices of its batch; fsync'd, so a SIGKILL loses nothing written). Environment switches:
SLOW_AFTER_STEP=k sleeps 0.3 s per step after step k (time for the test to kill it mid-epoch);
HANG_IN_SAVE_AT_STEP=k makes the checkpoint write at step >= k stop half-way (the temp file
half written, then <steps log>.saving created) until killed; NO_POSITION_RESTORE=1 resumes
without the data loader's position (the negative control); POISON_IMAGE=i makes the features
of dataset image i NaN in every training batch that holds it (an injected bad batch);
PLATEAU_NEVER_IMPROVES=1 makes schedule=warmup_plateau count every validation after the first
as no improvement (it must beat the best by 10); NO_PLATEAU_CATCH_UP=1 resumes without taking
the plateau step an epoch-end checkpoint left due (the negative control).
"""

import hashlib
import io
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import TINY, compose_cfg, shrink  # noqa: E402

from captioning.lit import train  # noqa: E402
from captioning.lit.checkpoint_policy import AtomicCheckpointIO  # noqa: E402
from captioning.lit.datamodule import CaptionDataModule  # noqa: E402
from captioning.lit.module import CaptioningModule  # noqa: E402

out, data, steps_log, *overrides = sys.argv[1:]
slow_after = int(os.environ.get("SLOW_AFTER_STEP", "-1"))
training_step = CaptioningModule.training_step


def recording_step(self, batch, batch_idx):
    step = self.trainer.global_step
    with open(steps_log, "a") as f:
        f.write(json.dumps({"rank": self.global_rank, "step": step, "epoch": self.current_epoch,
                            "images": batch["index"].tolist(),
                            "rng": hashlib.sha1(torch.get_rng_state().numpy().tobytes()).hexdigest()[:12],
                            "w": float(self.model.decoder.embed.weight.double().sum())}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    if 0 <= slow_after < step:
        time.sleep(0.3)
    return training_step(self, batch, batch_idx)


CaptioningModule.training_step = recording_step

if hang_at := int(os.environ.get("HANG_IN_SAVE_AT_STEP", "0")):
    write = AtomicCheckpointIO._write

    def half_write(checkpoint, f):
        if checkpoint["global_step"] < hang_at:
            return write(checkpoint, f)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        f.flush()
        os.fsync(f.fileno())
        Path(steps_log + ".saving").touch()
        time.sleep(600)  # killed here

    AtomicCheckpointIO._write = staticmethod(half_write)

if os.environ.get("NO_POSITION_RESTORE"):
    init = CaptionDataModule.__init__

    def forgetful_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.restore_position = False

    CaptionDataModule.__init__ = forgetful_init

if os.environ.get("PLATEAU_NEVER_IMPROVES"):
    from captioning.lit import schedules

    plateau_init = schedules.WarmupPlateau.__init__

    def never_improves(self, *args, **kwargs):
        plateau_init(self, *args, **{**kwargs, "threshold_mode": "abs", "threshold": 10.0})

    schedules.WarmupPlateau.__init__ = never_improves

if os.environ.get("NO_PLATEAU_CATCH_UP"):
    CaptioningModule._catch_up_plateau = lambda self: None

if (poison := int(os.environ.get("POISON_IMAGE", "-1"))) >= 0:
    from captioning.lit import datamodule

    class PoisonedCollate(datamodule.Collate):
        def __call__(self, items):
            batch = super().__call__(items)
            if "tokens" in batch and poison in batch["index"].tolist():
                batch["features"] = batch["features"].clone()
                batch["features"][batch["index"].tolist().index(poison)] = float("nan")
            return batch

    datamodule.Collate = PoisonedCollate

train(shrink(compose_cfg(TINY + overrides, Path(out), Path(data))))
