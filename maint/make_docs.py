"""Regenerate every generated part of the docs from committed data (`make docs`):

- the verdict's sentences (README.md, docs/summary.md, docs/comparison.md) from the newest
  committed report of each convergence grid a block names (captioning/compare/verdict.py: the
  rule and the markers);
- docs/benchmarks.md's tables from the measurements docs/figures.json lists (the benchmark's
  JSON per CPU kind, each pair of runs against the peer, the CPU tricks' runs), between
  `<!-- figures:NAME -->` and `<!-- /figures:NAME -->`;
- README.md's and docs/comparison.md's tables of differences from the same report
  (`<!-- figures:convergence-width -->`, `convergence-conditions`: REPORT_TABLES), and from
  another convergence grid's newest committed report under its own name
  (`<!-- figures:convergence_learned-width_lstm -->`: results/convergence_learned/);
- docs/model.md's table of attention modes from the registry (each mode's file: its score, its
  use; the parameter counts built from it), between `<!-- figures:attention-modes -->` markers;
- docs/summary.md's table of the fixed-budget grid's differences from its report
  (`<!-- figures:cross-modal -->`: CROSS_MODAL) and its speed and memory bullets from the
  benchmark, the peer pairs and the store's memory record (`summary-speed`);
- docs/results.md's table of runs on the built-in data from the records results/builtin/index.json
  lists (`<!-- figures:builtin-runs -->`); docs/learned_features.md's encoder check from the files
  of the learned grid's results/encoder_candidates/ (`encoder-check`);
- docs/gpu_and_cluster.md's estimate of a COCO epoch (`coco-estimate`) and docs/benchmark_cpu.md,
  whole, from docs/benchmark_cpu.json (the tables scripts/benchmark.py
  prints for that result: `captioning.benchmark.markdown`);
- docs/model.md's attention-zoo table and docs/comparison.md's compute per part from their
  reports, and any doc's `<!-- figures:NAME -->` where results/measurements/NAME.json is the
  record of a measurement (maint/docs_records.py).

    python maint/make_docs.py            # rewrite what changed, name each file
    python maint/make_docs.py --check    # exit 1 if anything would change (the test suite runs it)

A figure is typed once, in its JSON; the docs' tables are made from it, never edited by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "maint"))

import docs_records as records  # noqa: E402
from docs_records import MARK, ZOO, measurement_names, measurement_table, zoo_table  # noqa: E402
from docs_speed import (  # noqa: E402
    BENCHMARK_CPU,
    BENCHMARKS,
    FIGURES,
    GPU_DOC,
    coco_estimate,
    render_figures,
    summary_speed,
)
from docs_studies import (  # noqa: E402
    CROSS_MODAL,
    LEARNED,
    MODEL,
    QUOTING,
    RESULTS,
    SUMMARY,
    builtin_table,
    cross_modal_table,
    encoder_check_doc,
    modes_table,
    quoted_grids,
    report_tables,
)

from captioning.benchmark import markdown  # noqa: E402
from captioning.compare import verdict  # noqa: E402
from captioning.errors import ArgumentParser  # noqa: E402


def generated() -> dict[str, str]:
    """{file: its text as generated} for every file with generated parts."""
    try:
        out = verdict.generated(ROOT)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    texts = {name: out.get(name, (ROOT / name).read_text()) for name in QUOTING}
    for grid in quoted_grids(list(texts.values())):
        if (path := verdict.newest_report(ROOT, grid)) is None:
            raise SystemExit(f"error: the docs quote results/{grid}/, which has no committed report")
        report = json.loads(path.read_text())
        texts = {name: report_tables(text, grid, report) for name, text in texts.items()}
    out.update(texts)
    out[BENCHMARKS] = render_figures((ROOT / BENCHMARKS).read_text(), json.loads(FIGURES.read_text()))
    cross_modal = json.loads((ROOT / CROSS_MODAL).read_text())
    out[SUMMARY] = _filled(_filled(out.get(SUMMARY, (ROOT / SUMMARY).read_text()), "cross-modal",
                                   cross_modal_table(cross_modal)),
                           "summary-speed", summary_speed(json.loads(FIGURES.read_text())))
    out[RESULTS] = _filled((ROOT / RESULTS).read_text(), "builtin-runs", builtin_table())
    out[LEARNED] = _filled(out.get(LEARNED, (ROOT / LEARNED).read_text()), "encoder-check",
                           encoder_check_doc())
    out[MODEL] = _filled(_filled((ROOT / MODEL).read_text(), "attention-modes", modes_table()),
                         "attention-zoo", zoo_table(records.read(ZOO)))
    out[f"{BENCHMARK_CPU}.md"] = markdown(records.read(f"{BENCHMARK_CPU}.json"))
    out[GPU_DOC] = _filled((ROOT / GPU_DOC).read_text(), "coco-estimate", coco_estimate())
    measured = {record: measurement_table(record) for record in measurement_names()}
    for name in sorted({*out, *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))}):
        text = out.get(name, (ROOT / name).read_text())
        for record, table in measured.items():
            text = _filled(text, record, table)
        if text != (ROOT / name).read_text() or name in out:
            out[name] = text
    return out


def _filled(text: str, name: str, table: str) -> str:
    """`text` with the part between its `figures:name` markers replaced by `table`."""
    return MARK.sub(lambda m: f"{m.group(1)}\n{table}\n{m.group(4)}" if m.group(2) == name else m.group(0),
                    text)


def main() -> int:
    p = ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file would change")
    args = p.parse_args()
    stale = []
    for name, text in generated().items():
        if (ROOT / name).read_text() != text:
            stale.append(name)
            if not args.check:
                (ROOT / name).write_text(text)
    for name in stale:
        print(f"{name}: {'out of date (run make docs)' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
