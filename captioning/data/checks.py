"""The dataset checks that need no image decoding: run by `train.py` before any extraction
(fast: one stat per file) and reported in full by `scripts/prepare_data.py`."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from pathlib import Path

from ..errors import UserError
from .images import outside_root
from .records import ImageRecord

log = logging.getLogger(__name__)


def file_problems(records: list[ImageRecord], root: Path) -> dict[str, list[str]]:
    """Image files that are missing, that leave the image root, that several records list, or
    that several splits list."""
    outside = [str(r.path) for r in records if outside_root(r.path, root)]
    missing = [str(r.path) for r in records if not r.path.is_file()]
    resolved = [str(r.path.resolve()) for r in records]
    counts = Counter(resolved)
    return {"missing": missing, "outside_root": outside,
            "duplicates": sorted(p for p, n in counts.items() if n > 1),
            "in_several_splits": sorted(p for p, s in _splits_of(records, resolved).items() if len(s) > 1)}


def _splits_of(records: list[ImageRecord], resolved: list[str]) -> dict[str, set[str]]:
    splits = defaultdict(set)
    for r, path in zip(records, resolved):
        splits[path].add(r.split)
    return splits


def split_overlaps(records: list[ImageRecord]) -> dict[str, list[str]]:
    """{"train/val": [image files in both], "train/test": [...], "val/test": [...]}, resolved paths."""
    splits = _splits_of(records, [str(r.path.resolve()) for r in records])
    return {f"{a}/{b}": sorted(p for p, s in splits.items() if {a, b} <= s)
            for a, b in (("train", "val"), ("train", "test"), ("val", "test"))}


def check_splits(records: list[ImageRecord], where: str) -> None:
    """Refuse a dataset whose val or test split shares images with train (a model scored on
    images it trained on scores too high, and the checkpoint chosen on val would be chosen on
    training images); warn when val and test share images. `where`: the file that set the splits."""
    overlaps = split_overlaps(records)
    bad = {k: v for k, v in overlaps.items() if v and k.startswith("train/")}
    if bad:
        raise UserError(
            "the dataset puts images into training and into " + " and ".join(
                f"{k.split('/')[1]} ({len(v)} image(s), e.g. {', '.join(v[:3])})" for k, v in bad.items())
            + f"; the splits come from {where}. Give every image one split (the Karpathy JSON's "
            "split fields, or a data.split_file that matches the images read); scripts/prepare_data.py "
            "lists every file in several splits")
    if overlaps["val/test"]:
        log.warning("%d image(s) are in both val and test (e.g. %s): the test score is not of "
                    "unseen-by-selection images", len(overlaps["val/test"]), overlaps["val/test"][0])


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
