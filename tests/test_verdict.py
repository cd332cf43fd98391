"""The fixed-budget grid's table in docs/summary.md (which the README's verdict paragraph links
to) is generated from the committed report it names (maint/make_docs.py: cross_modal_table):
every number is the report.json's, rounded as printed, and a number changed in the report moves
in the table; `make docs` leaves the committed page unchanged (tests/test_docs_generated.py)."""

import copy
import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_docs", ROOT / "maint" / "make_docs.py")
make_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_docs)
REPORT = json.loads((ROOT / make_docs.CROSS_MODAL).read_text())
CELL = re.compile(r"\*{0,2}([+-]\d+\.\d)%\*{0,2} \[(-?\d+\.\d), (-?\d+\.\d)\] / \[(-?\d+\.\d), (-?\d+\.\d)\]")


def _rows(report: dict) -> list[list[str]]:
    lines = make_docs.cross_modal_table(report).splitlines()[2:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_every_number_is_the_reports_and_every_pair_is_shown():
    checked = 0
    for label, section in make_docs.CROSS_MODAL_PARTS:
        part = REPORT if section is None else REPORT["sections"][section]
        rows = {row[1].lower(): row[2:] for row in _rows(REPORT) if row[0] == label}
        for d in part["diffs"]:
            cell = rows[d["decoder"]][list(make_docs.CROSS_MODAL_DIMS).index(d["dims"])]
            want = [d["rel_pct"], *d["rel_pct_seed"], *d["rel_pct_boot"]]
            assert [float(x) for x in CELL.search(cell).groups()] == [round(x, 1) for x in want]
            assert cell.startswith("**") == (d["rel_pct_seed"][0] > 0 or d["rel_pct_seed"][1] < 0)
            checked += 1
        for u in part["unpaired"]:
            cell = rows[u["decoder"]][list(make_docs.CROSS_MODAL_DIMS).index(u["dims"])]
            assert cell.startswith("no pair") and all(f"{m} {n}" in cell for m, n in u["counted"].items())
    assert checked >= 6


def test_a_number_changed_in_the_report_moves_in_the_table():
    changed = copy.deepcopy(REPORT)
    changed["diffs"][0]["rel_pct"] += 0.1
    assert make_docs.cross_modal_table(changed) != make_docs.cross_modal_table(REPORT)
    summary = (ROOT / make_docs.SUMMARY).read_text()
    assert make_docs.cross_modal_table(REPORT) in summary
