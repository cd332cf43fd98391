"""The report of the comparison at convergence (experiment=convergence): per decoder x dims x
mode the test score of the best-validation checkpoint with CIs over seeds and over images and
the epochs it took; the additive - dot (and - scaled dot) gap after 2 and 5 epochs and at
convergence, paired by seed; condition x mode interactions (difference of differences, e.g. the
width's: compare.interactions' [mismatched_whitened, matched]). Every number from the cells' own
files (results.json, predictions*.json); its tables: compare/convergence_tables.py, its figures:
compare/report_figures.py."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..metrics.stats import bootstrap_bleu, count_references, percentile_interval, t_interval
from .cells import Cell
from .provenance_table import cell_provenance
from .report import image_stats, predicted

BEST = "best"  # the stage of best.ckpt; the others are snapshot epochs ("2", "5")
CONTRASTS = (("additive", "dot"), ("additive", "scaled_dot"))


class Cells:
    """The cells' files, read once: results, and per stage the per-image BLEU statistics."""

    def __init__(self, dirs: dict[Cell, Path], references: dict) -> None:
        self.dirs, self.refs = dirs, count_references(references)  # counted once for all cells
        self.ids = sorted(references, key=str)
        self.results = {c: json.loads((d / "results.json").read_text()) for c, d in dirs.items()}
        self._stats: dict[tuple[Path, str], np.ndarray | None] = {}

    def score(self, cell: Cell, stage: str, metric: str = "test/bleu4") -> float | None:
        res = self.results[cell]
        scores = res if stage == BEST else res.get("at_epoch", {}).get(stage, {})
        return scores.get(metric)

    def per_image(self, cell: Cell, stage: str) -> np.ndarray | None:
        """(M, 10) BLEU statistics of the stage's test captions, rows = sorted image ids."""
        key = (self.dirs[cell], stage)
        if key not in self._stats:
            name = "predictions.json" if stage == BEST else f"predictions_epoch{stage}.json"
            path = self.dirs[cell] / name
            self._stats[key] = image_stats(predicted(path), self.refs, self.ids) if path.is_file() else None
        return self._stats[key]


def longest_wait(curve: list[dict], monitor: str = "val/bleu4") -> int:
    """The most validations in a row without a new best that were followed by one: how much
    patience this run needed (early_stopping.patience must exceed it to have found its best)."""
    best, wait, longest = None, 0, 0
    for entry in curve:
        score = entry.get(monitor)
        if score is None:
            continue
        if best is None or score > best:
            longest, best, wait = max(longest, wait), score, 0
        else:
            wait += 1
    return longest


def _peak_lr(out: Path) -> float:
    """A cell's peak learning rate from its committed config (cell.json), for cells at the base
    rate (Cell.lr 0)."""
    saved = out / "cell.json"
    view = json.loads(saved.read_text()) if saved.is_file() else {}
    return float(((view.get("optim") or {}).get("optimizer") or {}).get("lr") or 0.0)


def _group(dirs: dict[Cell, Path]) -> dict[tuple[str, str, str], dict[int, Cell]]:
    groups: dict[tuple, dict[int, Cell]] = defaultdict(dict)
    for cell in sorted(dirs):
        groups[(cell.decoder, cell.dims, cell.attention)][cell.seed] = cell
    return groups


def _paired(cells: Cells, pairs: list[tuple[list[Cell], list[int]]], stage: str,
            samples: int) -> dict | None:
    """A signed sum of cells per seed (pairs: ([cells], [+1/-1 signs]) for each seed), its
    mean and t interval over seeds and the image-bootstrap interval (the same resampled images
    for every cell). None when a stage is missing for some cell."""
    per_seed, draws = [], []
    for group, signs in pairs:
        scores = [cells.score(c, stage) for c in group]
        stats = [cells.per_image(c, stage) for c in group]
        if any(s is None for s in scores) or any(s is None for s in stats):
            return None
        per_seed.append(sum(sign * s for sign, s in zip(signs, scores)))
        draws.append(sum(sign * bootstrap_bleu([s], samples) for sign, s in zip(signs, stats)))
    if not per_seed:
        return None
    # CIDEr-D beside BLEU-4: over seeds only (its IDF is the whole test set's, so an image
    # resample would need the scorer per draw)
    cider = [[cells.score(c, stage, "test/cider") for c in group] for group, _ in pairs]
    cider_ci = None
    if all(x is not None for xs in cider for x in xs):
        cider_ci = t_interval([sum(sign * x for sign, x in zip(signs, xs))
                               for xs, (_, signs) in zip(cider, pairs)])
    return {"seeds": len(per_seed), "per_seed": per_seed, "ci": t_interval(per_seed),
            "boot": percentile_interval(np.mean(draws, axis=0)), "cider": cider_ci}


def convergence_report(dirs: dict[Cell, Path], references: dict, spec: dict,
                       samples: int = 1000) -> dict:
    """dirs: the grid's finished cells (at their chosen rates) -> the report as data."""
    cells = Cells(dirs, references)
    groups = _group(dirs)
    stages = [str(e) for e in spec["snapshot_epochs"]] + [BEST]
    rows = []
    for (decoder, dims, mode), by_seed in groups.items():
        res = [cells.results[c] for c in by_seed.values()]
        best_epochs = [r.get("best_epoch") for r in res if r.get("best_epoch") is not None]
        boot = bootstrap_bleu([cells.per_image(c, BEST) for c in by_seed.values()], samples)
        rows.append({
            "decoder": decoder, "dims": dims, "attention": mode, "seeds": sorted(by_seed),
            "lr": sorted({c.lr or _peak_lr(dirs[c]) for c in by_seed.values()}),
            "bleu4": t_interval([r["test/bleu4"] for r in res]), "bleu4_boot": percentile_interval(boot),
            "cider": t_interval([r.get("test/cider", math.nan) for r in res]),
            # the validation score the sweep chose rates by, over seeds (sweep.add_margins)
            "val_best": t_interval([r["best_score"] for r in res if r.get("best_score") is not None]),
            "at_epoch": {s: t_interval([x for c in by_seed.values() if (x := cells.score(c, s)) is not None])
                         for s in stages if s != BEST},
            "attr_acc": t_interval([r.get("test/attr_acc", math.nan) for r in res]),
            "attn_entropy": t_interval([r.get("test/attn_entropy", math.nan) for r in res]),
            "best_epoch": t_interval(best_epochs), "best_epoch_range": [min(best_epochs), max(best_epochs)]
            if best_epochs else None,
            "epochs_trained": [r.get("epochs_trained") for r in res],
            "stopped_early": sum(r.get("stopped_early_after") is not None for r in res),
            "longest_wait": max(longest_wait(r.get("val_curve", [])) for r in res),
            "capped": sum(r.get("stopped_early_after") is None for r in res),
        })
    # a dims on another dims' features (query_projected: mismatched_whitened's) takes from it
    # the modes it did not run, for its gaps (compare.same_features)
    same = dict(spec.get("same_features") or {})

    def runs(decoder: str, dims: str, mode: str) -> tuple[dict[int, Cell] | None, str]:
        if (decoder, dims, mode) not in groups and dims in same:
            dims = same[dims]
        return groups.get((decoder, dims, mode)), dims

    def gap_runs(decoder: str, dims: str, a: str, b: str, other: str | None = None) -> tuple | None:
        """(a's runs, a's dims, b's runs, b's dims) of the gap a − b in dims (b on `other`'s
        features where given); None where a side has not run, or where both sides are borrowed:
        that would be the other condition's gap under this one's name."""
        (ga, a_dims), (gb, b_dims) = runs(decoder, dims, a), runs(decoder, other or dims, b)
        if not ga or not gb or dims not in (a_dims, b_dims):
            return None
        return ga, a_dims, gb, b_dims

    def paired(sides: list[tuple[dict[int, Cell], int]]) -> tuple[list[int], dict]:
        seeds = sorted(set.intersection(*(set(g) for g, _ in sides)))
        pairs = [([g[s] for g, _ in sides], [sign for _, sign in sides]) for s in seeds]
        return seeds, {s: _paired(cells, pairs, s, samples) for s in stages}

    gaps = []
    for decoder, dims in sorted({(d, w) for d, w, _ in groups}):
        contrasts = list(CONTRASTS)
        if dims in same:  # the same mode on both: what this condition changes (the projection)
            contrasts += [(m, m) for m in sorted({m for d, w, m in groups if d == decoder and w == dims})
                          if (decoder, same[dims], m) in groups]
        for a, b in contrasts:
            # a mode against itself: on the features this condition shares (the projection's effect)
            found = gap_runs(decoder, dims, a, b, same[dims] if a == b else None)
            if not found:
                continue
            ga, a_dims, gb, b_dims = found
            seeds, by_stage = paired([(ga, 1), (gb, -1)])
            gaps.append({"decoder": decoder, "dims": dims, "a": a, "b": b, "a_dims": a_dims,
                         "b_dims": b_dims, "seeds": seeds, "stages": by_stage})
    # compare.controls: a mode in one condition against another mode in another (general at
    # 512-d − dot at 2048-d: both with a learned map on the keys, the width alone differs)
    controls = []
    for dims, a, other, b in spec.get("controls") or []:
        for decoder in sorted({d for d, _, _ in groups}):
            (ga, _), (gb, _) = runs(decoder, dims, a), runs(decoder, other, b)
            if ga and gb:
                seeds, by_stage = paired([(ga, 1), (gb, -1)])
                controls.append({"decoder": decoder, "dims": dims, "a": a, "b": b, "a_dims": dims,
                                 "b_dims": other, "seeds": seeds, "stages": by_stage})
    interactions = []
    for first, second in spec.get("interactions") or []:
        for decoder in sorted({d for d, _, _ in groups}):
            for a, b in CONTRASTS:
                sides = [gap_runs(decoder, dims, a, b) for dims in (first, second)]
                if not all(sides):
                    continue
                parts = [g for ga, _, gb, _ in sides for g in (ga, gb)]
                seeds, by_stage = paired(list(zip(parts, [1, -1, -1, 1])))
                interactions.append({"decoder": decoder, "a": a, "b": b, "conditions": [first, second],
                                     "seeds": seeds, "stages": by_stage})
    curves = {}
    for (decoder, dims, mode), by_seed in groups.items():
        curves[f"{decoder}/{dims}/{mode}"] = {
            str(c.seed): [[e["epoch"], e.get("val/bleu4")] for e in cells.results[c].get("val_curve", [])]
            for c in by_seed.values()}
    return {"rows": rows, "gaps": gaps, "interactions": interactions, "curves": curves,
            "stages": stages, "bootstrap_samples": samples,
            **({"controls": controls} if controls else {}), **tally(dirs)}


def tally(grid: dict[Cell, Path], sweep: dict[Cell, Path] | None = None) -> dict:
    """The grid's and its sweep's finished cells -> the report's compute (runs, CPU core-hours
    from each cell's cpu_s; a cell in both, one hash, counted once, as the grid's), its cost per
    part (`cost`) and provenance rows (commit, threads, machine, precision: each cell's own
    record)."""
    roles = {**{out: (c, "sweep") for c, out in (sweep or {}).items()},
             **{out: (c, "grid") for c, out in grid.items()}}
    results = {out: json.loads((out / "results.json").read_text()) for out in roles}
    return {"runs": len(results), "cpu_h": sum(r.get("cpu_s", 0) for r in results.values()) / 3600,
            "cost": cost(roles, results), "provenance": cell_provenance(results)}


def cost(roles: dict[Path, tuple[Cell, str]], results: dict[Path, dict]) -> list[dict]:
    """Cells and CPU core-hours per part (decoder x feature setting x role), the sweep's part
    of each before its grid's."""
    parts: dict[tuple[str, str, str], list[float]] = {}
    for out, (cell, role) in roles.items():
        parts.setdefault((cell.decoder, cell.dims, role), []).append(results[out].get("cpu_s", 0))
    order = sorted(parts, key=lambda part: (*part[:2], part[2] != "sweep"))
    return [{"decoder": d, "dims": dims, "role": role, "cells": len(parts[d, dims, role]),
             "cpu_h": sum(parts[d, dims, role]) / 3600} for d, dims, role in order]
