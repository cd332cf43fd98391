"""The verdict table (docs/summary.md, which the README's verdict paragraph links to) comes
from the committed report: every number in it equals the report.json it links to (rounded as
printed), so the documented verdict cannot drift from the data."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = ROOT / "docs" / "summary.md"
README = SUMMARY.read_text()
DIMS = {"matched (512-d, whitened)": "matched", "mismatched (2048-d, whitened)": "mismatched_whitened",
        "mismatched (2048-d, standardised)": "mismatched"}
CELL = re.compile(r"\*{0,2}([+-]\d+\.\d)%\*{0,2} \[(-?\d+\.\d), (-?\d+\.\d)\] / \[(-?\d+\.\d), (-?\d+\.\d)\]")


def _verdict_table() -> tuple[Path, list[str], list[list[str]]]:
    section = README.split("### The comparison's verdict", 1)[1]
    report = re.search(r"\]\(\.\./(results/[^)]+/report\.md)\)", section).group(1)
    rows = [line for line in section.split("\n\n", 3)[2].splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    body = [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]
    return ROOT / report.replace("report.md", "report.json"), header, body


def test_every_number_in_the_verdict_table_is_the_reports():
    path, header, body = _verdict_table()
    report = json.loads(path.read_text())
    checked = 0
    for row in body:
        features, decoder = row[0], row[1].lower()
        diffs = report["diffs"] if features.startswith("random") else \
            report["sections"]["cross_modal_trained"]["diffs"]
        for title, text in zip(header[2:], row[2:]):
            match = CELL.search(text)
            if not match:  # a sentence instead of a number ("no pair: ..."): no pair in the report
                assert not any(d["decoder"] == decoder and d["dims"] == DIMS[title] for d in diffs), text
                continue
            d = next(d for d in diffs if d["decoder"] == decoder and d["dims"] == DIMS[title])
            want = [d["rel_pct"], *d["rel_pct_seed"], *d["rel_pct_boot"]]
            assert [float(x) for x in match.groups()] == [round(x, 1) for x in want], (row[:2], title)
            checked += 1
    assert checked >= 6  # the table still has its numbers (a rewrite that drops them fails here)


def test_the_check_fails_on_a_changed_number(monkeypatch):
    """Negative control: one digit changed in the table is caught."""
    import sys

    original = SUMMARY.read_text()
    changed = original.replace("+15.0%** [13.6, 16.5]", "+15.1%** [13.6, 16.5]", 1)
    assert changed != original
    monkeypatch.setattr(sys.modules[__name__], "README", changed)
    try:
        test_every_number_in_the_verdict_table_is_the_reports()
    except AssertionError:
        return
    raise AssertionError("a changed number passed the check")
