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
