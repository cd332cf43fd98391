"""Where a grid stands, read from its results folder without training anything
(`python scripts/compare.py experiment=<name> compare.status=true`), and the same rows for the
grid's wandb run while it trains: each cell finished (its scores), running (its lock's holder),
interrupted (its checkpoint: the next run resumes it) or waiting, a running or interrupted
cell with the last epoch line of its train.log; a cell of this run whose job failed is
`failed`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from .cell_log import last_epoch
from .cells import Cell
from .lock import CellLock

STATES = ("finished", "running", "interrupted", "failed", "waiting")
SHOWN_COMMITS = 4  # the status's code line names at most this many commits


def whole_wall_s(res: dict) -> float | None:
    """A finished run's wall seconds over all its parts; None where its results.json gives
    only its last part's (a resumed run recorded before wall_time_s counted the killed parts)."""
    whole = not res.get("resumed") or "wall_time_s_earlier_parts" in res
    return res.get("wall_time_s") if whole else None


def has_checkpoint(out: Path) -> bool:
    """A cell's folder holds a checkpoint: a run there was killed mid-training (or finished)."""
    return any((out / "checkpoints").glob("*.ckpt"))


def cell_state(out: Path) -> dict:
    """A cell's state from its directory alone: {state, test_bleu4, val_best, wall_s, cpu_s,
    machine, holder, epoch, commit}; a query (it writes nothing, not even a lock file)."""
    row: dict = {"state": "waiting", "test_bleu4": None, "val_best": None, "wall_s": None,
                 "cpu_s": None, "machine": None, "holder": None, "epoch": None, "commit": None}
    done = out / "results.json"
    if done.is_file():
        res = json.loads(done.read_text())
        return {**row, "state": "finished", "test_bleu4": res.get("test/bleu4"),
                "val_best": res.get("best_score"), "wall_s": whole_wall_s(res),
                "cpu_s": res.get("cpu_s"), "machine": res.get("machine"), "commit": res.get("git_commit")}
    if (holder := CellLock(out).holder()) is not None:
        return {**row, "state": "running", "holder": holder, "epoch": last_epoch(out)}
    if has_checkpoint(out):
        return {**row, "state": "interrupted", "epoch": last_epoch(out)}
    return row


def grid_status(cells: list[Cell], dirs: dict[Cell, Path], failed: set[str] = frozenset()) -> list[dict]:
    """One row per cell, in grid order; `failed`: labels whose job failed in this run."""
    rows = []
    for cell in cells:
        row = {"cell": cell.label, "dir": str(dirs[cell]), **cell_state(dirs[cell])}
        if cell.label in failed and row["state"] != "finished":
            row["state"] = "failed"
        rows.append(row)
    return rows


def status_counts(rows: list[dict]) -> dict[str, int]:
    return {s: sum(r["state"] == s for r in rows) for s in STATES}


def status_text(name: str, root: Path, rows: list[dict]) -> str:
    """The table `compare.status=true` prints: a summary line, then a line per cell."""
    counts = status_counts(rows)
    head = f"grid {name} ({root}): {len(rows)} cells, " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n)
    width = max((len(r["cell"]) for r in rows), default=4)
    lines = [head] + [text for text in (cost_text(rows), code_text(rows)) if text]
    for r in rows:
        if r["state"] == "finished":
            score = "-" if r["test_bleu4"] is None else f"{r['test_bleu4']:.4f}"
            what = f"test BLEU-4 {score}" + (f", {r['wall_s'] / 60:.0f} min" if r["wall_s"] else "")
            what += f", {r['cpu_s'] / 60:.0f} CPU-min" if r["cpu_s"] else ""
            what += f", {r['machine']}" if r["machine"] else ""
        elif r["state"] == "running":
            what = f"held by {r['holder']}" + (f"; {r['epoch']}" if r.get("epoch") else "")
        elif r["state"] == "interrupted":
            what = "has a checkpoint: the next run resumes it"
            what += f" ({r['epoch']})" if r.get("epoch") else ""
        else:
            what = ""
        lines.append(f"  {r['cell']:<{width}}  {r['state']:<11}  {what}".rstrip())
    lines.append(f"  (cells under {root / 'cells'})")
    return "\n".join(lines)


def cost_text(rows: list[dict]) -> str | None:
    """The CPU time the finished cells recorded, and what the cells not finished would take at
    their mean: an estimate for planning (a running cell's part done is counted again, and a
    sweep's later choices may add cells or leave some waiting ones untrained). None before any
    finished cell recorded CPU time."""
    spent = [r["cpu_s"] for r in rows if r["state"] == "finished" and r["cpu_s"]]
    if not spent:
        return None
    mean = sum(spent) / len(spent)
    left = sum(r["state"] != "finished" for r in rows)
    cells = f"{len(spent)} finished cell" + "s" * (len(spent) != 1)
    text = f"  CPU time: {cells} took {sum(spent) / 3600:.1f} CPU-hours ({mean / 60:.0f} CPU-min a cell)"
    return text + (f"; the {left} not finished, at that mean: about {left * mean / 3600:.1f} CPU-hours"
                   if left else "")


def code_text(rows: list[dict]) -> str | None:
    """The code the finished cells ran at (each results.json's git_commit, its last part's),
    with how many at each: a grid continued at another commit, or from a tree with uncommitted
    changes (+dirty), shows it here before its report's provenance table does. None before any
    finished cell."""
    commits = Counter(_short(r["commit"]) for r in rows if r["state"] == "finished")
    if not commits:
        return None
    if len(commits) == 1:
        return f"  code: every finished cell ran at {next(iter(commits))}"
    most_first = sorted(commits.items(), key=lambda kv: (-kv[1], kv[0]))
    shown, rest = (most_first, []) if len(most_first) <= SHOWN_COMMITS else (
        most_first[:SHOWN_COMMITS - 1], most_first[SHOWN_COMMITS - 1:])
    parts = [f"{commit} ({_cells(n)})" for commit, n in shown]
    if rest:
        parts.append(f"{len(rest)} other commits ({_cells(sum(n for _, n in rest))})")
    return f"  code: the finished cells ran at {len(commits)} commits: " + ", ".join(parts)


def _cells(n: int) -> str:
    return f"{n} cell" + "s" * (n != 1)


def _short(commit: str | None) -> str:
    if not commit:
        return "a commit not recorded"
    sha, dirty = commit.split("+", 1)[0], "+dirty" in commit
    return sha[:7] + (" with uncommitted changes" if dirty else "")


def sweep_text(rows: list[dict], seeds: dict[str, int]) -> str:
    """Where a learning-rate sweep stands, a line per mode (`seeds`: each mode's sweep seeds
    per rate, in grid order): each rate begun, its mean validation score over the seeds
    finished there and how many of them; then the rate chosen, or the rates still needed (a
    rate counts once all its seeds have finished)."""
    by_group = {f"{r['decoder']}/{r['dims']}/{r['attention']}": r for r in rows}
    width = max((len(g) for g in seeds), default=4)
    lines = ["sweep (validation only):"]
    for group, n in seeds.items():
        r = by_group.get(group)
        if r is None:
            lines.append(f"  {group:<{width}}  nothing finished yet")
            continue
        begun = [f"{lr} {sum(x['score'] for x in runs) / len(runs):.4f} ({len(runs)} of {n} seeds)"
                 for lr, runs in r["rates"].items() if all(x["score"] is not None for x in runs)]
        if r["chosen"] is not None:
            what = f"chose {r['chosen']:g}" + (f" ({r['edge']} rate tried)" if r["edge"] else "")
        else:
            what = "needs " + ", ".join(f"{lr:g}" for lr in r["needed"])
        lines.append(f"  {group:<{width}}  " + "; ".join([*begun, what]))
    return "\n".join(lines)


COLUMNS = ["cell", "state", "test_bleu4", "val_best", "wall_s", "cpu_s", "machine"]


class GridBoard:
    """The grid's own wandb run (job_type 'grid', beside each cell's run): the table of its
    cells with their state and score, and the counts, logged again at every change (a plan's
    cells, compare/plan.py, join it as they are decided)."""

    def __init__(self, logger, cells: list[Cell]) -> None:
        self.run, self.cells = logger.experiment, cells

    def update(self, dirs: dict[Cell, Path], failed: set[str] = frozenset()) -> None:
        import wandb

        cells = [c for c in self.cells if c in dirs] + [c for c in dirs if c not in self.cells]
        rows = grid_status(cells, dirs, failed)
        table = wandb.Table(columns=COLUMNS, data=[[r[k] for k in COLUMNS] for r in rows])
        self.run.log({"grid/cells": table, **{f"grid/{s}": n for s, n in status_counts(rows).items()}})

    def finish(self) -> None:
        self.run.finish()
