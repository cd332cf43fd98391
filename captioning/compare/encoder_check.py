"""The encoder check of a learned-feature grid: which candidate encoders were tried, and the one
additive run at seed 0 on each that says whether attention has a job on its features
(maint/encoder_candidates.py writes the JSON files it reads). Grounding near 1x uniform with
attribute accuracy at its ceiling means any cell will do: a grid of attention modes on such
features measures something other than attention."""

from __future__ import annotations

import json
from pathlib import Path

COLUMNS = [("test/bleu4", "BLEU-4", 3), ("test/cider", "CIDEr-D", 3),
           ("test/attr_acc", "attribute accuracy", 3), ("test/grounding_ratio", "grounding (x uniform)", 2),
           ("test/attn_entropy", "attention entropy (nats)", 2)]


def encoder_check(folder: Path) -> list[dict]:
    """Every candidate row of the folder's JSON files ({candidate: row}), each with its file's
    stem as `label`, in file and row order; none (the report says so) where there are none."""
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return [{"label": f.stem if len(rows) == 1 else f"{f.stem}/{name}", "candidate": name, **row}
            for f in files for rows in [json.loads(f.read_text())] for name, row in rows.items()]


def encoder_check_table(rows: list[dict], folder: str = "") -> str:
    """The check's table, a row per candidate (the report's section and docs/learned_features.md)."""
    def cell(row: dict, key: str, digits: int) -> str:
        value = row.get(key)
        return "" if value is None else f"{value:.{digits}f}"

    lines = ["| candidate | encoder file (sha256) | " + " | ".join(h for _, h, _ in COLUMNS)
             + " | best epoch | machine |",
             "|---|---|" + "---:|" * len(COLUMNS) + "---:|---|"]
    if not rows:
        lines.append(f"| (no candidate files in {folder}: python maint/encoder_candidates.py --out "
                     f"{folder}/<name>.json) |" + " |" * (len(COLUMNS) + 3))
    for r in rows:
        lines.append(f"| {r['label']} | {(r.get('encoder_sha256') or 'random init')[:16]} | "
                     + " | ".join(cell(r, k, d) for k, _, d in COLUMNS)
                     + f" | {r.get('best_epoch', '')} | {r.get('machine', '')} |")
    return "\n".join(lines)


def encoder_check_markdown(rows: list[dict], folder: str = "") -> str:
    """The report's section: what the check is, then its table."""
    return "\n".join([
        "### The encoder check", "",
        "One additive run at seed 0 on each candidate's features (maint/encoder_candidates.py; "
        "the command of each run is in its file): grounding is the attention mass on the object a "
        "colour or shape word names against what uniform attention gives it; an encoder whose "
        "every cell carries the whole answer gives ~1x and attribute accuracy at its ceiling.", "",
        encoder_check_table(rows, folder)]) + "\n\n"
