"""The docs' generated parts (`make docs`: the verdict's sentences, the benchmark and peer
tables) are what the committed data makes: regenerating changes nothing, and a changed figure in
the data changes the table."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "maint"))

import make_docs  # noqa: E402


def test_make_docs_changes_nothing():
    done = subprocess.run([sys.executable, "maint/make_docs.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_table_is_made_from_its_files(monkeypatch):
    figures = json.loads(make_docs.FIGURES.read_text())
    text = (ROOT / make_docs.BENCHMARKS).read_text()
    assert make_docs.render_figures(text, figures) == text
    first = figures["peer"]["pairs"][0]
    ours = make_docs._read(first["ours"])
    changed = copy.deepcopy(ours)
    precision = changed["default_precision"]
    changed["train"][f"lstm/additive/{precision}"]["captions_per_s"] *= 2
    real = make_docs._read
    monkeypatch.setattr(make_docs, "_read", lambda rel: changed if rel == first["ours"] else real(rel))
    assert make_docs.render_figures(text, figures) != text


def test_a_results_command_is_its_recorded_settings():
    config = {"sections": "train", "modes": "additive", "refiners": "", "no_naive": True, "batch": 64}
    assert make_docs.command(config) == ("python scripts/benchmark.py --sections train --modes additive "
                                         "--refiners '' --no-naive")


def test_the_docs_quote_the_reports_rows_and_a_changed_number_changes_them():
    """README.md and docs/comparison.md show the convergence report's differences through
    `difference_table`: the rows each table asks for, group by group, from report.json; a
    difference moved in the report moves in the docs, and a group the report lacks is refused."""
    import pytest

    from captioning.compare import verdict
    from captioning.compare.convergence import difference_table

    report = json.loads(verdict.newest_report(ROOT).read_text())
    for name in make_docs.QUOTING:
        text = (ROOT / name).read_text()
        assert "<!-- figures:convergence-width -->" in text
        assert make_docs.report_tables(text, report) == text
    table = difference_table(report, make_docs.REPORT_TABLES["convergence-width"]).splitlines()
    groups = [tuple(line.split(" | ")[:2]) for line in table[2:]]
    asked = make_docs.REPORT_TABLES["convergence-width"]
    assert list(dict.fromkeys(groups)) == [("| " + d, c) for d, c in asked]
    moved = copy.deepcopy(report)
    gap = next(g for g in moved["gaps"] if (g["decoder"], g["dims"]) == ("lstm", "matched"))
    gap["stages"][verdict.BEST]["ci"]["mean"] += 0.5
    readme = (ROOT / "README.md").read_text()
    assert make_docs.report_tables(readme, moved) != readme
    with pytest.raises(ValueError, match="no differences"):
        difference_table(report, [("lstm", "no_such_dims")])
