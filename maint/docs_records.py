"""Tables of the docs made from the study's records (`make docs`, via maint/make_docs.py):

- `zoo_table`: docs/model.md's every-mode table from the attention zoo's report.json;
- `cost_table`: docs/comparison.md's compute per part from the convergence report's `cost`
  (each cell's own cpu_s, summed per decoder, feature setting and role);
- `measurement_table`: a table from one file of results/measurements/ (`<!-- figures:NAME -->`
  where results/measurements/NAME.json exists). Each such file is the record of one measurement:
  what was run (`command`, and in words what a command cannot say: `note`), where and when
  (`measured`), where the figures come from (`source`), the figures per run (`rows`, numbers as
  numbers) and how each column is shown (`columns`: its key, heading and format).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENTS = "results/measurements"
ZOO = "results/attention_zoo/2026-12-02_02-41-53/report.json"
# a generated part of a doc: between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->`
MARK = re.compile(r"(<!-- figures:([\w-]+) -->)(.*?)(<!-- /figures:\2 -->)", re.S)


def md_table(header: list[str], align: str, rows: list[list[str]]) -> str:
    """A markdown table; align: one letter per column, l (text) or r (a number)."""
    rule = ["---:" if a == "r" else "---" for a in align]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, rule, *rows])


def read(rel: str) -> dict:
    """A committed JSON file, by its path from the repository root (the one reader: tests
    replace it to change a figure)."""
    return json.loads((ROOT / rel).read_text())


def fmt(v: float | None, digits: int = 1) -> str:
    return "" if v is None else f"{v:,.{digits}f}"


def zoo_table(report: dict) -> str:
    """One row per attention mode, best test BLEU-4 first, the blind run last; a mode whose runs
    are another's (`same_as`: mixed is additive at equal widths) is named in that one's row."""
    rows = [r for r in report["rows"] if r["decoder"] == "lstm"]
    aliases = {r["same_as"]: r["attention"] for r in rows if r.get("same_as")}
    shown = sorted((r for r in rows if not r.get("same_as") and r["attention"] != "blind"),
                   key=lambda r: (-r["bleu4"]["mean"], r["attention"]))
    shown += [r for r in rows if r["attention"] == "blind"]
    out = []
    for r in shown:
        name = r["attention"]
        if name in aliases:
            name += f" (= {aliases[name]} here)"
        elif name == "blind":
            name += " (image zeroed)"
        params = r.get("attention_params")
        out.append([name, f"{r['bleu4']['mean']:.3f} ± {r['bleu4']['std']:.3f}",
                    f"{r['attr_acc']['mean']:.3f}", f"{r['grounding_ratio']['mean']:.2f}",
                    f"{r['attn_entropy']['mean']:.2f}", f"{params:,}" if params else "",
                    f"{r['captions_per_s']['mean']:.0f}"])
    header = ["mode", "test BLEU-4", "attr acc", "grounding (x uniform)", "entropy", "attention params",
              "train captions/s"]
    return md_table(header, "lrrrrrr", out)


def cost_table(report: dict) -> str:
    """Cells and CPU core-hours per decoder x feature setting of a convergence study (from the
    report's `cost`: its sweep's cells and its grid's), with the total."""
    parts: dict[tuple[str, str], dict[str, dict]] = {}
    for part in report["cost"]:
        parts.setdefault((part["decoder"], part["dims"]), {})[part["role"]] = part
    rows, cells, hours = [], 0, 0.0
    for (decoder, dims), roles in parts.items():
        n = sum(p["cells"] for p in roles.values())
        h = sum(p["cpu_h"] for p in roles.values())
        split = " + ".join(str(roles[r]["cells"]) if r in roles else "0" for r in ("sweep", "grid"))
        rows.append([f"{decoder}, {dims}", split, f"{h:.1f} ({h / n:.2f})"])
        cells, hours = cells + n, hours + h
    rows.append(["**total**", f"**{cells}**", f"**{hours:.1f}**"])
    return md_table(["part", "cells: sweep + grid", "CPU core-hours (a cell)"], "lrr", rows)


def _shown(value, fmt: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return fmt.format(value)


def measurement_table(name: str) -> str:
    """results/measurements/<name>.json as a table: a column per `columns` entry, a row per
    `rows` entry. A column: `key`, `head`, `format` (a str.format spec, "{}" by default),
    `text` (left-aligned), `difference` / `quotient` ([a, b]: the row's a − b, a / b), `ratio`
    (true: each row after the first also shows its value over the first row's). A row with
    `"bold": true` is the one its text picks. Absent values show empty."""
    record = read(f"{MEASUREMENTS}/{name}.json")
    columns, first = record["columns"], record["rows"][0]
    rows = []
    for row in record["rows"]:
        cells = []
        for c in columns:
            value = row.get(c["key"])
            if "difference" in c or "quotient" in c:
                a, b = (row.get(k) for k in c.get("difference") or c["quotient"])
                value = None if a is None or b is None else a - b if "difference" in c else a / b
            cell = _shown(value, c.get("format", "{}"))
            if c.get("ratio") and row is not first and value is not None and first.get(c["key"]):
                cell += f" ({value / first[c['key']]:.2f}x)"
            cells.append(cell)
        if row.get("bold"):
            cells = [f"**{c}**" if c else c for c in cells]
        rows.append(cells)
    align = "".join("l" if c.get("text") else "r" for c in columns)
    link = f"[{MEASUREMENTS}/{name}.json](../{MEASUREMENTS}/{name}.json)"
    return (md_table([c["head"] for c in columns], align, rows)
            + f"\n\n{record['measured']}: `{record['command']}`"
            + (f" ({record['note']})" if record.get("note") else "") + f"; record: {link}")


def measurement_names() -> list[str]:
    """Every measurement record's name (its file's stem)."""
    return sorted(p.stem for p in (ROOT / MEASUREMENTS).glob("*.json"))
