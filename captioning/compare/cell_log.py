"""A grid cell's own train.log, whichever process trains it (a worker's job, a SLURM job or the
grid's own process), as a `train.py` run has in its run dir: the epoch lines and warnings,
appended by each part of a resumed cell. `compare.status=true` reads its last epoch line to say
how far a running or interrupted cell has got."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOG = "train.log"
FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's, as train.py's log
EPOCH = re.compile(r"\] - (epoch \d+/\d+: .*)$")  # console.EpochLine's line


@contextmanager
def cell_log(out: Path) -> Iterator[Path]:
    """Everything logged at INFO and above goes to <out>/train.log too while the cell trains
    (a job process logs nowhere else: its root logger has no handler of its own)."""
    path = Path(out) / LOG
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(logging.INFO)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()


def last_epoch(out: Path, tail: int = 1 << 16) -> str | None:
    """The last epoch line of a cell's train.log ("epoch 14/40: val/bleu4 0.6912 (best
    0.6950), ..., 131 s"); None where it has none."""
    path = Path(out) / LOG
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - tail))  # the end of the file is enough
        lines = f.read().decode("utf-8", "replace").splitlines()
    return next((m.group(1) for line in reversed(lines) if (m := EPOCH.search(line))), None)
