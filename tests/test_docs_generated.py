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

import docs_records  # noqa: E402
import docs_speed  # noqa: E402
import docs_studies  # noqa: E402
import make_docs  # noqa: E402


def test_make_docs_changes_nothing():
    done = subprocess.run([sys.executable, "maint/make_docs.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_table_is_made_from_its_files(monkeypatch):
    figures = json.loads(docs_speed.FIGURES.read_text())
    text = (ROOT / docs_speed.BENCHMARKS).read_text()
    assert docs_speed.render_figures(text, figures) == text
    first = figures["peer"]["pairs"][0]
    ours = docs_records.read(first["ours"])
    changed = copy.deepcopy(ours)
    precision = changed["default_precision"]
    changed["train"][f"lstm/additive/{precision}"]["captions_per_s"] *= 2
    real = docs_records.read
    monkeypatch.setattr(docs_records, "read", lambda rel: changed if rel == first["ours"] else real(rel))
    assert docs_speed.render_figures(text, figures) != text


def test_a_results_command_is_its_recorded_settings():
    config = {"sections": "train", "modes": "additive", "refiners": "", "no_naive": True, "batch": 64}
    assert docs_speed.command(config) == ("python scripts/benchmark.py --sections train --modes additive "
                                         "--refiners '' --no-naive")


def test_the_docs_quote_the_reports_rows_and_a_changed_number_changes_them():
    """README.md and docs/comparison.md show the convergence report's differences through
    `difference_table`: the rows each table asks for, group by group, from report.json; a
    difference moved in the report moves in the docs, and a group the report lacks is refused."""
    import pytest

    from captioning.compare import verdict
    from captioning.compare.convergence_tables import difference_table

    report = json.loads(verdict.newest_report(ROOT).read_text())
    for name in ("README.md", docs_studies.COMPARISON):
        text = (ROOT / name).read_text()
        assert "<!-- figures:convergence-width -->" in text
        assert docs_studies.report_tables(text, "convergence", report) == text
    table = difference_table(report, docs_studies.REPORT_TABLES["width"]).splitlines()
    groups = [tuple(line.split(" | ")[:2]) for line in table[2:]]
    asked = docs_studies.REPORT_TABLES["width"]
    assert list(dict.fromkeys(groups)) == [("| " + d, c) for d, c in asked]
    moved = copy.deepcopy(report)
    gap = next(g for g in moved["gaps"] if (g["decoder"], g["dims"]) == ("lstm", "matched"))
    gap["stages"][verdict.BEST]["ci"]["mean"] += 0.5
    readme = (ROOT / "README.md").read_text()
    assert docs_studies.report_tables(readme, "convergence", moved) != readme
    with pytest.raises(ValueError, match="no differences"):
        difference_table(report, [("lstm", "no_such_dims")])


def test_another_grids_blocks_are_made_from_its_own_report_alone(tmp_path, monkeypatch):
    """A second convergence grid (results/convergence_learned/) in the same docs: its verdict
    block and its tables come from its newest committed report, the random-feature ones from
    theirs; a block of a grid without a committed report is an error, not left standing."""
    import pytest

    from captioning.compare import verdict

    random = json.loads(verdict.newest_report(ROOT).read_text())
    learned = copy.deepcopy(random)
    for g in learned["gaps"]:
        g["stages"][verdict.BEST]["ci"]["mean"] += 0.25
    learned["gaps"] = [g for g in learned["gaps"] if g["decoder"] == "lstm"]  # no Transformer there
    for name in verdict.FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        text = (ROOT / name).read_text()
        if name == "README.md":
            text += "".join(f"\n<!-- {m} -->\n<!-- /{m} -->" for m in (
                "verdict:convergence_learned:headline", "figures:convergence_learned-width_lstm")) + "\n"
        (tmp_path / name).write_text(text)
    committed = verdict.newest_report(ROOT).relative_to(ROOT)
    reports = {"convergence": tmp_path / committed,
               "convergence_learned": tmp_path / "results/convergence_learned/2026-12-07_00-00-00"
                                              / "report.json"}
    for grid, data in (("convergence", random), ("convergence_learned", learned)):
        reports[grid].parent.mkdir(parents=True)
        reports[grid].write_text(json.dumps(data))
    monkeypatch.setattr(verdict, "newest_report", lambda root=ROOT, grid="convergence": reports.get(grid))
    texts = verdict.generated(tmp_path)
    readme = texts["README.md"]
    ours = readme.split("<!-- verdict:convergence_learned:headline -->")[1]
    assert verdict.sentences(learned, headline=True)[0] in ours
    assert verdict.sentences(random, headline=True)[0] not in ours
    assert verdict.sentences(random, headline=True)[0] in readme.split("<!-- verdict:convergence_learned")[0]
    assert texts["docs/comparison.md"] == (ROOT / "docs/comparison.md").read_text()  # nothing of its there
    tables = docs_studies.report_tables(readme, "convergence_learned", learned)
    width = tables.split("<!-- figures:convergence_learned-width_lstm -->")[1].split("<!-- /figures")[0]
    gap = next(g for g in learned["gaps"] if (g["decoder"], g["dims"]) == ("lstm", "matched"))
    assert f"{gap['stages'][verdict.BEST]['ci']['mean']:+.3f}" in width and "transformer" not in width
    assert tables.split("<!-- figures:convergence_learned-width_lstm")[0] == readme.split(
        "<!-- figures:convergence_learned-width_lstm")[0]  # the random grid's tables untouched
    # a table asking for a row the report lacks (the Transformer's, of an LSTM-only grid) is refused
    with pytest.raises(ValueError, match="no differences"):
        docs_studies.report_tables(readme.replace("learned-width_lstm", "learned-width"),
                                   "convergence_learned", learned)
    monkeypatch.setattr(verdict, "newest_report", lambda root=ROOT, grid="convergence": None
                        if grid == "convergence_learned" else reports[grid])
    with pytest.raises(ValueError, match="no committed report under results/convergence_learned/"):
        verdict.generated(tmp_path)


def test_the_benchmark_page_is_its_result_rendered():
    """docs/benchmark_cpu.md is `markdown(docs/benchmark_cpu.json)`; a changed figure moves it."""
    from captioning.benchmark import markdown

    result = json.loads((ROOT / f"{docs_speed.BENCHMARK_CPU}.json").read_text())
    page = make_docs.generated()[f"{docs_speed.BENCHMARK_CPU}.md"]
    assert page == markdown(result) == (ROOT / f"{docs_speed.BENCHMARK_CPU}.md").read_text()
    estimate = docs_speed.coco_estimate()
    assert f"{result['train']['lstm/additive/fp32']['captions_per_s']:.1f} captions/s" in estimate
    result["train"]["lstm/additive/fp32"]["captions_per_s"] += 10
    assert markdown(result) != page


def test_every_measurement_record_is_a_table_of_a_doc_and_its_figures_are_the_records(monkeypatch):
    """Each results/measurements/*.json names its command, machine and source, and fills the
    markers of at least one doc; each of its numbers is in that table as its column formats it;
    a difference or ratio column is computed from the row; a changed figure moves the table."""
    docs = {p: p.read_text() for p in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]}
    names = docs_records.measurement_names()
    assert names
    for name in names:
        record = json.loads((ROOT / docs_records.MEASUREMENTS / f"{name}.json").read_text())
        assert record["command"] and record["measured"] and record["source"] and record["about"]
        table = docs_records.measurement_table(name)
        assert [p for p, text in docs.items() if f"<!-- figures:{name} -->\n{table}\n" in text], name
        for row in record["rows"]:
            for col in record["columns"]:
                value = row.get(col["key"])
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    assert col.get("format", "{}").format(value) in table, (name, col["key"])
        keys = {c["key"] for c in record["columns"]}
        assert all(set(r) - {"bold"} <= keys for r in record["rows"]), name  # no figure left unshown
    gap = docs_records.measurement_table("new_modes_blind").splitlines()[2]
    assert "| 0.543 | 0.238 | +0.305 |" in gap
    store = docs_records.measurement_table("store_memory")
    assert "4,605 MB (1.15x)" in store and "4,019 MB |" in store
    real = docs_records.read

    def moved(rel: str) -> dict:
        out = real(rel)
        if rel.endswith("scst.json"):
            out = copy.deepcopy(out)
            out["rows"][0]["cider"] += 0.1
        return out

    before = docs_records.measurement_table("scst")
    monkeypatch.setattr(docs_records, "read", moved)
    assert docs_records.measurement_table("scst") != before


def test_the_zoo_and_cost_tables_are_their_reports():
    """docs/model.md's every-mode table: a row per mode of the zoo's report (mixed, the same
    runs as additive, named in its row; the blind run last); docs/comparison.md's compute per
    part sums to the report's total runs and core-hours; changed figures move both."""

    from captioning.compare import verdict

    zoo = json.loads((ROOT / docs_records.ZOO).read_text())
    table = docs_records.zoo_table(zoo)
    lines = table.splitlines()[2:]
    modes = {r["attention"] for r in zoo["rows"]} - {"mixed"}
    assert len(lines) == len(modes) and lines[-1].startswith("| blind")
    assert "| additive (= mixed here) |" in table
    for r in zoo["rows"]:
        assert f"{r['bleu4']['mean']:.3f} ± {r['bleu4']['std']:.3f}" in table
    changed = copy.deepcopy(zoo)
    changed["rows"][0]["bleu4"]["mean"] += 0.01
    assert docs_records.zoo_table(changed) != table
    report = json.loads(verdict.newest_report(ROOT).read_text())
    cost = docs_records.cost_table(report)
    assert f"| **total** | **{report['runs']}** | **{report['cpu_h']:.1f}** |" in cost
    assert sum(p["cells"] for p in report["cost"]) == report["runs"]
    assert abs(sum(p["cpu_h"] for p in report["cost"]) - report["cpu_h"]) < 1e-6
    assert f"<!-- figures:convergence-cost -->\n{cost}\n" in (ROOT / docs_studies.COMPARISON).read_text()


def test_the_summary_figures_are_the_benchmarks_and_the_peer_pairs(monkeypatch):
    """docs/summary.md's speed bullets: the benchmark's ratios and each CPU's pairs against the
    peer (their count and median), made from the files figures.json lists."""
    figures = json.loads(docs_speed.FIGURES.read_text())
    text = docs_speed.summary_speed(figures)
    assert text in (ROOT / docs_studies.SUMMARY).read_text()
    ratios = docs_records.read(f"{docs_speed.BENCHMARK_CPU}.json")["ratios"]
    assert f"{ratios['train_lstm_additive_fp32_vs_naive_fp32']:.2f}x the naive" in text
    for cpu in {p["cpu"] for p in figures["peer"]["pairs"]}:
        n = sum(p["cpu"] == cpu for p in figures["peer"]["pairs"])
        assert f"{cpu}: LSTM + additive training" in text and f"({n} pair" in text
    real = docs_records.read

    def faster(rel: str) -> dict:
        out = copy.deepcopy(real(rel))
        if rel.endswith("benchmark_cpu.json"):
            out["ratios"]["transformer_cache_speedup"] += 1
        return out

    monkeypatch.setattr(docs_records, "read", faster)
    assert docs_speed.summary_speed(figures) != text
