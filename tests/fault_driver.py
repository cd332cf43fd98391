"""A tiny training run through the real command line (captioning.cli.main: its one-line errors
and exit statuses), for tests/test_faults.py to break in the middle.

    python tests/fault_driver.py <out dir> <data dir> [overrides...]

Environment switches: DISK_FULL_AT_STEP=k makes every checkpoint write from global step k on
fail as a full disk does (torch.save's file refuses bytes with ENOSPC after the first 4 KiB);
SLOW_AFTER_STEP=k sleeps 0.3 s per training step after step k (time for the test to act mid-run)
and writes the step being trained into <out dir>.step.
"""

import errno
import io
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import TINY, TINY_DECODERS  # noqa: E402

from captioning.lit.checkpoint_policy import AtomicCheckpointIO  # noqa: E402
from captioning.lit.module import CaptioningModule  # noqa: E402

out, data, *overrides = sys.argv[1:]


class FullDisk(io.RawIOBase):
    """A file on a volume with 4 KiB left."""

    def __init__(self, f, left: int = 4096) -> None:
        self.f, self.left = f, left

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(b) > self.left:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.left -= len(b)
        return self.f.write(b)


if (full_at := int(os.environ.get("DISK_FULL_AT_STEP", "-1"))) >= 0:
    write = AtomicCheckpointIO._write

    def failing_write(checkpoint, f):
        return write(checkpoint, FullDisk(f) if checkpoint["global_step"] >= full_at else f)

    AtomicCheckpointIO._write = staticmethod(failing_write)

if (slow_after := int(os.environ.get("SLOW_AFTER_STEP", "-1"))) >= 0:
    step = CaptioningModule.training_step

    def slow_step(self, batch, batch_idx):
        Path(out + ".step").write_text(str(self.trainer.global_step))
        if self.trainer.global_step > slow_after:
            time.sleep(0.3)
        return step(self, batch, batch_idx)

    CaptioningModule.training_step = slow_step

tiny = [f"decoder.{k}={v}" for k, v in TINY_DECODERS["lstm"].items()] + ["attention.attn_dim=32"]
sys.argv = ["train.py", *TINY, *tiny, f"paths.data_dir={data}", f"hydra.run.dir={out}", *overrides]
from captioning.cli import main  # noqa: E402

main()
