"""Where a grid's cells come from, from their own records: one row per commit, thread count,
machine(s), training precision, grid and encoder file, with its cell count, and its table."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def threads_text(n: int | None) -> str | None:
    """Say "2 threads" or "1 thread"; None where none were recorded."""
    return None if not n else f"{n} thread{'s' if n != 1 else ''}"


def _threads_of(r: dict) -> str:
    """A cell's torch threads as its record gives them; cells from before the field was recorded:
    CPU time over wall time, how many threads were busy on average (2 cores: ~1 or ~2)."""
    if r.get("threads"):
        return str(r["threads"])
    if r.get("cpu_s") and r.get("wall_time_s"):
        return f"not recorded (CPU/wall {r['cpu_s'] / r['wall_time_s']:.1f})"
    return "not recorded"


def cell_provenance(results: dict[Path, dict]) -> list[dict]:
    """{cell dir: results.json} -> one row per (commit, threads, machine(s), precision, the grid
    whose root holds the cell, and the encoder file's sha256 where cells record one) with its
    cell count: every fact from the cells' own records."""
    counts: dict[tuple, int] = defaultdict(int)
    for out, r in results.items():
        machines = " + ".join(dict.fromkeys(r.get("machines") or [r.get("machine") or "not recorded"]))
        counts[(r.get("git_commit") or "not recorded", _threads_of(r), machines,
                r.get("train_precision") or "not recorded", Path(out).parent.parent.name,
                r.get("encoder_sha256"))] += 1
    return [{"commit": k[0], "threads": k[1], "machine": k[2], "precision": k[3], "grid": k[4],
             **({"encoder_sha256": k[5]} if any(key[5] for key in counts) else {}), "cells": n}
            for k, n in sorted(counts.items(), key=lambda kv: (*kv[0][:5], kv[0][5] or ""))]


def provenance_markdown(rows: list[dict]) -> list[str]:
    """The provenance table; an encoder column where the cells record their encoder file."""
    enc = any("encoder_sha256" in p for p in rows)
    head = "| commit | threads | machine | training precision | grid (results root) |"
    return [head + (" encoder file (sha256) |" if enc else "") + " cells |",
            "|---|---|---|---|---|" + ("---|" if enc else "") + "---:|"] + [
        f"| {p['commit']} | {p['threads']} | {p['machine']} | {p['precision']} | {p['grid']} |"
        + (f" {p.get('encoder_sha256') or 'random init'} |" if enc else "") + f" {p['cells']} |"
        for p in rows]
