"""The data report of `scripts/prepare_data.py`: everything about a dataset a user should know
before training on it, and its feature store built (or resumed) on the way."""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..models.attention.position import grid_side
from ..models.encoder_specs import global_first
from .prepare import dataset_features
from .vocab import Vocabulary

# Training RAM, measured by a one-off script (docs/benchmarks.md, AMX CPU, LSTM,
# 2 DataLoader workers): 4,019 MB at 5,000 images, 4,605 MB at 40,000: a fixed part (torch,
# the model, the normaliser fit on <= 100k rows) and a few KB per image (records, captions).
RAM_BASE_MB, RAM_PER_IMAGE_KB = 3935, 16.7


def data_report(data_cfg: dict, enc_cfg: dict) -> dict:
    """Fast checks, the store built (slow: every image is decoded once; under the same locks as
    training, so a run beside this one waits for the store instead of writing it too), caption
    statistics, the vocabulary, and the skipped files counted by reason."""
    located, features, reasons = dataset_features(data_cfg, enc_cfg)
    records, problems = located.records, located.file_problems
    splits = Counter(r.split for r in records)
    per_image = np.array([len(r.captions) for r in records])
    lengths = np.array([len(c) for r in records for c in r.captions])
    train = [c for r in records if r.split == "train" for c in r.captions]
    min_freq = data_cfg["min_word_freq"]
    report = {
        "images": len(records), "images_per_split": dict(splits),
        "captions": int(per_image.sum()),
        "captions_per_image": {"min": int(per_image.min(initial=0)), "mean": round(float(per_image.mean()), 2)
                               if len(per_image) else 0.0, "max": int(per_image.max(initial=0))},
        "captions_dropped_no_word": sum(r.empty_captions for r in records),
        "caption_tokens_percentiles": {str(q): float(np.percentile(lengths, q)) if len(lengths) else 0.0
                                       for q in (5, 50, 95, 100)},
        "vocabulary": {"min_word_freq": min_freq, "size": len(Vocabulary.build(train, min_freq))},
        "files": {k: len(v) for k, v in problems.items()},
        "file_examples": {k: v[:5] for k, v in problems.items() if v},
        "estimated_training_ram_gb": round((RAM_BASE_MB + RAM_PER_IMAGE_KB * len(records) / 1024) / 1024, 1),
    }
    rows, cells, dim = features.shape  # as built: extracted grids, or precomputed regions padded
    first = int(global_first(enc_cfg))  # a global vector ahead of the grid (ViT's class token)
    keys = cells - first
    side = grid_side(keys) if getattr(features, "counts", None) is None or features.grid else None
    report["store"] = {"grid": (f"{side}x{side}" if side else f"up to {keys} regions")
                       + (" and a global vector" if first else ""),
                       "rows": rows, "size_gb": round(rows * cells * dim * 2 / 1e9, 2),
                       "path": str(features.path)}
    skipped = [(str(r.path), why) for r, why in zip(records, reasons) if why]
    report["skipped"] = dict(Counter(why.split(" (")[0].split(":")[0] for _, why in skipped))
    report["skipped_files"] = [f"{path}: {why}" for path, why in skipped]
    report["usable_images"] = len(records) - len(skipped)
    return report


def summary(report: dict) -> str:
    """The report as a few readable lines."""
    cpi, pct = report["captions_per_image"], report["caption_tokens_percentiles"]
    lines = [
        f"images: {report['images']} "
        f"({', '.join(f'{k} {v}' for k, v in report['images_per_split'].items())}); "
        f"usable: {report['usable_images']}",
        f"captions: {report['captions']} ({cpi['min']}-{cpi['max']} per image, mean {cpi['mean']}); "
        f"dropped (no word): {report['captions_dropped_no_word']}",
        f"caption length in tokens: 5% {pct['5']:.0f}, median {pct['50']:.0f}, 95% {pct['95']:.0f}, "
        f"max {pct['100']:.0f}",
        f"vocabulary at min_word_freq={report['vocabulary']['min_word_freq']}: "
        f"{report['vocabulary']['size']} words",
        "files: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in report["files"].items()),
        "skipped: " + (", ".join(f"{k} {v}" for k, v in report["skipped"].items()) or "none"),
        f"store: {report['store']['rows']} rows x {report['store']['grid']}"
        f"{'' if 'regions' in report['store']['grid'] else ' grid'}, "
        f"{report['store']['size_gb']} GB at {report['store']['path']}",
        f"estimated training RAM: {report['estimated_training_ram_gb']} GB (docs/benchmarks.md)",
    ]
    return "\n".join(lines)
