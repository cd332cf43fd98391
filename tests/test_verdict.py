"""Tables the docs quote from committed records (maint/docs_studies.py). docs/summary.md's table of
the fixed-budget grid (the README's verdict paragraph links to it) comes from the report it
names: every number is the report.json's, rounded as printed, and a number changed in the report
moves in the table. docs/results.md's runs table comes from results/builtin's records the same
way. `make docs` leaves the committed pages unchanged (tests/test_docs_generated.py)."""

import copy
import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_docs", ROOT / "maint" / "make_docs.py")
make_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_docs)  # it puts maint/ on sys.path
import docs_records  # noqa: E402
import docs_studies  # noqa: E402

REPORT = json.loads((ROOT / docs_studies.CROSS_MODAL).read_text())
CELL = re.compile(r"\*{0,2}([+-]\d+\.\d)%\*{0,2} \[(-?\d+\.\d), (-?\d+\.\d)\] / \[(-?\d+\.\d), (-?\d+\.\d)\]")


def _rows(report: dict) -> list[list[str]]:
    lines = docs_studies.cross_modal_table(report).splitlines()[2:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_every_number_is_the_reports_and_every_pair_is_shown():
    checked = 0
    for label, section in docs_studies.CROSS_MODAL_PARTS:
        part = REPORT if section is None else REPORT["sections"][section]
        rows = {row[1].lower(): row[2:] for row in _rows(REPORT) if row[0] == label}
        for d in part["diffs"]:
            cell = rows[d["decoder"]][list(docs_studies.CROSS_MODAL_DIMS).index(d["dims"])]
            want = [d["rel_pct"], *d["rel_pct_seed"], *d["rel_pct_boot"]]
            assert [float(x) for x in CELL.search(cell).groups()] == [round(x, 1) for x in want]
            assert cell.startswith("**") == (d["rel_pct_seed"][0] > 0 or d["rel_pct_seed"][1] < 0)
            checked += 1
        for u in part["unpaired"]:
            cell = rows[u["decoder"]][list(docs_studies.CROSS_MODAL_DIMS).index(u["dims"])]
            assert cell.startswith("no pair") and all(f"{m} {n}" in cell for m, n in u["counted"].items())
    assert checked >= 6


def test_a_number_changed_in_the_report_moves_in_the_table():
    changed = copy.deepcopy(REPORT)
    changed["diffs"][0]["rel_pct"] += 0.1
    assert docs_studies.cross_modal_table(changed) != docs_studies.cross_modal_table(REPORT)
    summary = (ROOT / docs_studies.SUMMARY).read_text()
    assert docs_studies.cross_modal_table(REPORT) in summary


def test_the_builtin_runs_table_is_each_records(monkeypatch):
    """docs/results.md's runs table: each row's figures are its record's, a changed record moves
    its row, and a record the index lists but the repository lacks stops `make docs`, naming it."""
    import pytest

    table = docs_studies.builtin_table()
    record = json.loads((ROOT / docs_studies.BUILTIN / "make_train" / "results.json").read_text())
    row = next(line for line in table.splitlines() if line.startswith("| `make train`"))
    assert f"| {record['test/bleu4']:.3f} | {record['test/cider']:.3f} |" in row
    read = docs_records.read

    def changed(rel: str) -> dict:
        out = read(rel)
        if rel.endswith("make_train/results.json"):
            out = {**out, "test/bleu4": out["test/bleu4"] + 0.001}
        return out

    monkeypatch.setattr(docs_records, "read", changed)
    assert docs_studies.builtin_table() != table
    monkeypatch.setattr(docs_studies, "BUILTIN", "results/no_such_folder")
    monkeypatch.setattr(docs_records, "read", lambda rel: {"runs": [{"name": "x", "command": "c",
                                                                   "record": "results.json"}]})
    with pytest.raises(SystemExit, match="no_such_folder/x/results.json is missing"):
        docs_studies.builtin_table()
