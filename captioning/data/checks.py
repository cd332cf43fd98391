"""The dataset checks that need no image decoding: run by `train.py` before any extraction
(fast: one stat per file) and reported in full by `scripts/prepare_data.py`."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

from .images import outside_root
from .karpathy import ImageRecord

log = logging.getLogger(__name__)


def file_problems(records: list[ImageRecord], root: Path) -> dict[str, list[str]]:
    """Image files that are missing, that leave the image root, or that several records list."""
    outside = [str(r.path) for r in records if outside_root(r.path, root)]
    missing = [str(r.path) for r in records if not r.path.is_file()]
    counts = Counter(str(r.path.resolve()) for r in records)
    return {"missing": missing, "outside_root": outside,
            "duplicates": sorted(p for p, n in counts.items() if n > 1)}


def check_files(records: list[ImageRecord], root: Path) -> dict[str, list[str]]:
    """Fail now when no image file exists (a wrong data.image_root: one sentence, not
    thousands of skipped files later); warn with counts for the rest (they are skipped and
    listed by name when the store is built)."""
    problems = file_problems(records, root)
    missing = problems["missing"]
    if records and len(missing) == len(records):
        raise FileNotFoundError(
            f"none of the {len(records)} image files of the dataset exists (e.g. {missing[0]}); "
            f"images are read from {root}/<filepath>/<filename>: set data.image_root to the folder "
            "that holds them (see data/README.md)")
    for kind, files in problems.items():
        if files:
            log.warning("%d of %d image files: %s (e.g. %s)", len(files), len(records),
                        kind.replace("_", " "), files[0])
    return problems
