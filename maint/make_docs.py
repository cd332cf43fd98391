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
  (`<!-- figures:convergence_learned-width -->`: results/convergence_learned/);
- docs/model.md's table of attention modes from the registry (each mode's file: its score, its
  use; the parameter counts built from it), between `<!-- figures:attention-modes -->` markers;
- docs/summary.md's table of the fixed-budget grid's differences from its report
  (`<!-- figures:cross-modal -->`: CROSS_MODAL) and its speed and memory bullets from the
  benchmark, the peer pairs and the store's memory record (`summary-speed`);
- docs/results.md's table of runs on the built-in data from the records results/builtin/index.json
  lists (`<!-- figures:builtin-runs -->`);
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
import re
import statistics
import sys
from dataclasses import MISSING
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "maint"))

from docs_records import (  # noqa: E402
    MEASUREMENTS,
    ZOO,
    cost_table,
    md_table,
    measurement_names,
    measurement_table,
    zoo_table,
)

from captioning.benchmark import config_fields, markdown  # noqa: E402
from captioning.compare import verdict  # noqa: E402
from captioning.errors import ArgumentParser  # noqa: E402

FIGURES = ROOT / "docs" / "figures.json"
BENCHMARKS = "docs/benchmarks.md"
BENCHMARK_CPU = "docs/benchmark_cpu"  # .json: a benchmark's result; .md: its tables
GPU_DOC = "docs/gpu_and_cluster.md"
MARK = re.compile(r"(<!-- figures:([\w-]+) -->)(.*?)(<!-- /figures:\2 -->)", re.S)


def _read(rel: str) -> dict:
    return json.loads((ROOT / rel).read_text())


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else ""


def _pair(ours: float | None, peer: float | None) -> str:
    return f"{_f(ours)} / {_f(peer)}" if ours and peer else ""


def _f(v: float | None, digits: int = 1) -> str:
    return "" if v is None else f"{v:,.{digits}f}"


def _tflops(flop_per_s: float | None) -> str:
    return "" if flop_per_s is None else f"{flop_per_s / 1e12:.3g}"


def command(config: dict) -> str:
    """The scripts/benchmark.py command that made a result: its flags that differ from the
    defaults (the result's `config` records every setting)."""
    flags = []
    for f in config_fields():
        if f.name not in config:
            continue
        value, default = config[f.name], (None if f.default is MISSING else f.default)
        if value == default:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, list):  # older results recorded lists where the flag takes a, b
            value = ",".join(map(str, value))
        flags.append(flag if value is True else f"{flag} ''" if value == "" else f"{flag} {value}")
    return " ".join(["python scripts/benchmark.py", *flags])


def _ours(result: dict) -> tuple[float | None, float | None]:
    """(LSTM + additive training captions/s in the precision the run chose, greedy images/s)."""
    precision = result.get("default_precision", "fp32")
    train = result.get("train", {}).get(f"lstm/additive/{precision}", {})
    greedy = result.get("decode", {}).get("greedy_lstm", {})
    return train.get("captions_per_s"), greedy.get("images_per_s")


MACHINE_COLUMNS = ["CPU", "date, commit", "precision chosen", "matmul peak fp32 / bf16, TFLOP/s",
                   "LSTM + additive training, captions/s", "x naive", "greedy x naive",
                   "beam 5: batched x per image", "dot / additive training (LSTM)", "result"]


def machines_table(figures: dict) -> str:
    rows, commands = [], []
    for m in figures["machines"]:
        r = _read(m["file"])
        precision = r.get("default_precision", "fp32")
        ratios, peak = r.get("ratios", {}), r.get("peak", {})
        date = (m.get("date") or r.get("date", ""))[:10]
        commit = m.get("commit") or str(r.get("commit", ""))[:7]
        link = f"[{Path(m['file']).name}]({Path(m['file']).relative_to('docs')})"
        rows.append([m["cpu"], f"{date}, {commit}", precision,
                     f"{_tflops(peak.get('fp32_flop_per_s'))} / {_tflops(peak.get('bf16_flop_per_s'))}",
                     _f(_ours(r)[0]), _f(ratios.get("train_lstm_additive_default_vs_naive_fp32"), 2),
                     _f(ratios.get("greedy_lstm_vs_naive"), 2),
                     _f(ratios.get("beam_batched_vs_per_image_lstm"), 2),
                     _f(ratios.get(f"train_lstm_dot_over_additive_{precision}"), 2), link])
        commands.append(f"- {Path(m['file']).name}: `{command(r['config'])}`")
    return (md_table(MACHINE_COLUMNS, "lllrrrrrrl", rows)
            + "\n\nEach result's command (its `config` holds every setting):\n\n" + "\n".join(commands))


PEER_COLUMNS = ["CPU", "pair (UTC)", "LSTM + additive training, 64 captions a step: ours / peer, captions/s",
                "x peer", "64 images x 5 captions: ours / peer", "x peer",
                "greedy LSTM: ours / peer, images/s", "x peer"]


def _pair_figures(ours: dict, peer: dict) -> tuple[float | None, float | None, float | None, float | None]:
    """(our training captions/s, the peer's, our greedy images/s, the peer's) of one pair."""
    train, greedy = _ours(ours)
    peer_train = peer["train"].get("updown/spi1", {}).get("captions_per_s")
    peer_greedy = peer.get("decode", {}).get("greedy/updown", {}).get("images_per_s")
    return train, peer_train, greedy, peer_greedy


def peer_table(figures: dict) -> str:
    rows = []
    for p in figures["peer"]["pairs"]:
        ours, peer = _read(p["ours"]), _read(p["peer"])
        train, peer_train, greedy, peer_greedy = _pair_figures(ours, peer)
        spi5 = spi5_peer = None
        if "ours_spi5" in p:
            spi5 = _ours(_read(p["ours_spi5"]))[0]
            spi5_peer = peer["train"].get("updown/spi5", {}).get("captions_per_s")
        links = ", ".join(f"[{k}]({Path(p[k]).relative_to('docs')})"
                          for k in ("ours", "ours_spi5", "peer") if k in p)
        note = f", {p['note']}" if p.get("note") else ""
        rows.append([p["cpu"], f"{p.get('when') or ours['date'][:16]}{note} ({links})",
                     _pair(train, peer_train), _x(train, peer_train), _pair(spi5, spi5_peer),
                     _x(spi5, spi5_peer), _pair(greedy, peer_greedy), _x(greedy, peer_greedy)])
    return md_table(PEER_COLUMNS, "lllrlrlr", rows)


def _span(values: list[float]) -> str:
    """'3.0x' for one value; the median and the range for several ('3.0x, 2.9-4.8x')."""
    lo, hi, mid = min(values), max(values), statistics.median(values)
    return f"{mid:.1f}x" if len(values) == 1 else f"{mid:.1f}x (median; {lo:.1f}-{hi:.1f}x)"


def summary_speed(figures: dict) -> str:
    """docs/summary.md's bullets on speed and memory, from the benchmark result, the peer pairs
    and the feature store's memory record (each number once, in its JSON)."""
    machine = next(m for m in figures["machines"] if m["file"] == f"{BENCHMARK_CPU}.json")
    ratios = _read(machine["file"])["ratios"]
    beam = [ratios[f"beam_batched_vs_per_image_{d}"] for d in ("lstm", "transformer")]
    by_cpu: dict[str, tuple[list[float], list[float]]] = {}
    for p in figures["peer"]["pairs"]:
        train, peer_train, greedy, peer_greedy = _pair_figures(_read(p["ours"]), _read(p["peer"]))
        trains, greedies = by_cpu.setdefault(p["cpu"], ([], []))
        if train and peer_train:
            trains.append(train / peer_train)
        if greedy and peer_greedy:
            greedies.append(greedy / peer_greedy)
    store = _read(f"{MEASUREMENTS}/store_memory.json")["rows"]
    lines = [
        f"- Speed ({machine['cpu']}): the LSTM training step with keys prepared once per image is "
        f"{ratios['train_lstm_additive_fp32_vs_naive_fp32']:.2f}x the naive tutorial-style step; batched "
        f"beam search is {min(beam):.1f}-{max(beam):.1f}x one image at a time; the Transformer's KV "
        f"cache makes decoding {ratios['transformer_cache_speedup']:.1f}x faster "
        "([benchmarks.md](benchmarks.md)).",
        f"- Against {figures['peer']['name']} at the same shapes, side by side "
        "([benchmarks.md](benchmarks.md), the peer table; our precision chosen by measurement):"]
    lines += [f"  {cpu}: LSTM + additive training {_span(t)} its captions/s, greedy decoding {_span(g)} "
              f"({len(t)} pair{'s' if len(t) > 1 else ''})." for cpu, (t, g) in by_cpu.items()]
    lines.append(
        f"- Real data: features live in an on-disk store read row by row; with "
        f"{store[-1]['images'] / store[0]['images']:.0f}x the images training needs "
        f"{store[-1]['train_mb'] / store[0]['train_mb']:.2f}x the memory and evaluation "
        f"{store[-1]['eval_mb'] / store[0]['eval_mb']:.2f}x ([benchmarks.md](benchmarks.md), the feature "
        "store).")
    return "\n".join(lines)


# COCO's Karpathy split with restval: training images x 5 captions; every image of the dataset
# (train2014 + val2014) is extracted once.
COCO_TRAIN_CAPTIONS, COCO_IMAGES = 113_287 * 5, 123_287


def coco_estimate() -> str:
    """docs/gpu_and_cluster.md's estimate of a COCO epoch on the benchmark's CPU: training steps
    at its LSTM + additive captions/s, feature extraction at its encoder's images/s."""
    result = _read(f"{BENCHMARK_CPU}.json")
    train = result["train"][f"lstm/additive/{result['default_precision']}"]["captions_per_s"]
    encode = result["encoder"]["from_files"]["images_per_s"]
    return (f"- training steps: {COCO_TRAIN_CAPTIONS:,} captions at {train:.1f} captions/s, about "
            f"{COCO_TRAIN_CAPTIONS / train / 60:.0f} minutes an epoch;\n"
            f"- feature extraction, once (ResNet-50 at 224 px from JPEG files): {COCO_IMAGES:,} images at "
            f"{encode:.1f} images/s, about {COCO_IMAGES / encode / 3600:.1f} h;")


def cpu_speed_table(figures: dict) -> str:
    """Each CPU trick's speed-up (time without / with) per measured machine, from the results
    of `scripts/benchmark.py --sections cpu_speed` that figures.json lists."""
    runs = [(m, _read(m["file"])) for m in figures["cpu_speed"]]
    keys = list(dict.fromkeys(k for _, r in runs for k in r["cpu_speed"]))
    rows = [[k.replace("/", " / ")] + [_f(r["cpu_speed"].get(k, {}).get("speedup"), 2) for _, r in runs]
            for k in keys]
    header = ["trick / where / precision"] + [
        f"{m['cpu']} ([{Path(m['file']).name}]({Path(m['file']).relative_to('docs')}))" for m, _ in runs]
    env = ["".join(f"{k}={v} " for k, v in r.get("isa_limits", {}).items()) for _, r in runs]
    commands = [f"- {Path(m['file']).name}: `{e}{command(r['config'])}`" for (m, r), e in zip(runs, env)]
    return md_table(header, "l" + "r" * len(runs), rows) + "\n\n" + "\n".join(commands)


TABLES = {"machines": machines_table, "peer": peer_table, "cpu-speed": cpu_speed_table}


def render_figures(text: str, figures: dict) -> str:
    records = set(measurement_names())

    def table(m: re.Match) -> str:
        if m.group(2) in records:
            return m.group(0)  # filled from its record (generated)
        if m.group(2) not in TABLES:
            raise SystemExit(f"error: {BENCHMARKS}: unknown table figures:{m.group(2)}; "
                             f"known: {', '.join(TABLES)}")
        return f"{m.group(1)}\n{TABLES[m.group(2)](figures)}\n{m.group(4)}"

    return MARK.sub(table, text)


def _params(name: str, query: int, keys: int, **extra) -> int:
    import torch

    from captioning.models import ATTENTIONS, build_attention
    from captioning.schema import ATTENTION
    from captioning.schema.fields import defaults

    cfg = {k: v for k, v in defaults(ATTENTION[name]).items() if k != "name"}
    if "input_dim" in ATTENTIONS.target(name).from_decoder:
        cfg.update(extra)
    with torch.device("meta"):
        return sum(p.numel() for p in build_attention(name, query, keys, 512, **cfg).parameters())


def modes_table() -> str:
    """Every registered attention mode: its score and use (the mode's `table`), its parameter
    counts at the claim's dims (query 512, keys 2048, values 512) and at matched widths (keys
    512), with its defaults, and with the LSTM's input where the decoder supplies one."""
    from captioning.models import ATTENTIONS

    rows = []
    for name in ATTENTIONS:
        target = ATTENTIONS.target(name)
        first = (target.__doc__ or "").strip().split("\n")[0]
        score, use = target.table.get(name, (first, ""))
        wide, matched = f"{_params(name, 512, 2048):,}", f"{_params(name, 512, 512):,}"
        if "input_dim" in target.from_decoder:  # what the decoder supplies changes the count
            wide += f" (LSTM {_params(name, 512, 2048, input_dim=512):,})"
            matched += f" (LSTM {_params(name, 512, 512, input_dim=512):,})"
        rows.append([f"`{name}`", score, wide, matched, use])
    header = ["mode", "score (q: query, k: key)", "params, keys 2048-d", "keys 512-d", "when to use"]
    return md_table(header, "llrrl", rows)


MODEL = "docs/model.md"

# The fixed-budget grid's table in docs/summary.md (`<!-- figures:cross-modal -->`): additive − dot
# per feature setting, from the report it links to; the columns are its feature settings.
SUMMARY = "docs/summary.md"
CROSS_MODAL = "results/cross_modal/2026-12-02_02-40-44/report.json"
CROSS_MODAL_DIMS = {"matched": "matched (512-d, whitened)",
                    "mismatched_whitened": "mismatched (2048-d, whitened)",
                    "mismatched": "mismatched (2048-d, standardised)"}
CROSS_MODAL_PARTS = (("random-init ResNet-50", None), ("trained ResNet-50", "cross_modal_trained"))


def _difference(d: dict) -> str:
    """'+14.1% [12.0, 16.3] / [11.3, 17.0]': relative additive − dot, its CI over seeds, then
    over test images; bold where the seeds' interval excludes zero."""
    lo, hi = d["rel_pct_seed"]
    value = f"{d['rel_pct']:+.1f}%"
    value = f"**{value}**" if lo > 0 or hi < 0 else value
    blo, bhi = d["rel_pct_boot"]
    return f"{value} [{lo:.1f}, {hi:.1f}] / [{blo:.1f}, {bhi:.1f}]"


def cross_modal_table(report: dict) -> str:
    rows = []
    for label, section in CROSS_MODAL_PARTS:
        part = report if section is None else report["sections"][section]
        diffs = {(d["decoder"], d["dims"]): d for d in part["diffs"]}
        unpaired = {(u["decoder"], u["dims"]): u["counted"] for u in part["unpaired"]}
        for decoder in dict.fromkeys(dec for dec, _ in [*diffs, *unpaired]):
            cells = []
            for dims in CROSS_MODAL_DIMS:
                if (decoder, dims) in diffs:
                    cells.append(_difference(diffs[decoder, dims]))
                elif (decoder, dims) in unpaired:
                    counted = unpaired[decoder, dims]
                    cells.append("no pair (runs that beat their blind run: " + ", ".join(
                        f"{mode} {n}" for mode, n in counted.items()) + ")")
                else:
                    cells.append("")
            name = decoder.capitalize() if decoder == "transformer" else decoder.upper()
            rows.append([label, name, *cells])
    return md_table(["features", "decoder", *CROSS_MODAL_DIMS.values()], "llrrr", rows)

# A convergence report's tables the docs quote, by the rows they take (decoder, dims or
# "first − second" conditions); `<!-- figures:GRID-KIND -->` takes them from the newest committed
# report of results/GRID/ (a grid's rows are never set beside another's in one table).
REPORT_TABLES = {
    "width": [("lstm", "matched"), ("lstm", "mismatched_whitened"),
              ("lstm", "mismatched_whitened − matched"), ("transformer", "mismatched_whitened")],
    "conditions": [("lstm", "native512"), ("lstm", "native512 − matched"),
                   ("lstm", "mismatched_whitened − native512"), ("lstm", "grid7"),
                   ("lstm", "grid7 − mismatched_whitened"), ("lstm", "query_projected")],
}
COMPARISON = "docs/comparison.md"
QUOTING = ("README.md", COMPARISON)
GRID_MARK = re.compile(r"(convergence\w*)-(\w+)")  # a marker's name: the grid, the table kind


def report_tables(text: str, grid: str, report: dict) -> str:
    """`text` with its `figures:GRID-KIND` tables of `grid` made from `report`; KIND: a table
    of REPORT_TABLES (a difference table: only the rows the report has), or `cost`."""
    from captioning.compare.convergence import difference_table

    def table(m: re.Match) -> str:
        name = GRID_MARK.fullmatch(m.group(2))
        if not name or name.group(1) != grid:
            return m.group(0)
        kind = name.group(2)
        if kind == "cost":
            return f"{m.group(1)}\n{cost_table(report)}\n{m.group(4)}"
        if kind not in REPORT_TABLES:
            raise SystemExit(f"error: figures:{m.group(2)}: no such table of a convergence report; "
                             f"known: {', '.join(f'{grid}-{k}' for k in [*REPORT_TABLES, 'cost'])}")
        rows = [g for g in REPORT_TABLES[kind] if _has_rows(report, g)]
        return f"{m.group(1)}\n{difference_table(report, rows)}\n{m.group(4)}"

    return MARK.sub(table, text)


def _has_rows(report: dict, group: tuple[str, str]) -> bool:
    """Whether the report has differences of (decoder, dims or "first − second")."""
    return any((g["decoder"], g["dims"]) == group for g in report["gaps"]) or any(
        (i["decoder"], " − ".join(i["conditions"])) == group for i in report["interactions"])


def quoted_grids(texts: list[str]) -> list[str]:
    """The convergence grids whose report the texts quote (verdict or figures markers)."""
    names = {m.group(2) for t in texts for m in verdict.MARK.finditer(t)}
    names |= {g.group(1) for t in texts for m in MARK.finditer(t) if (g := GRID_MARK.fullmatch(m.group(2)))}
    return sorted(names)


# docs/results.md's table of runs on the built-in data (`<!-- figures:builtin-runs -->`): one row
# per run that results/builtin/index.json lists, from the record it wrote.
RESULTS = "docs/results.md"
BUILTIN = "results/builtin"
BUILTIN_COLUMNS = ["command", "test BLEU-1", "BLEU-4", "CIDEr-D", "attr acc (joint)", "colour", "shape",
                   "size", "position", "grounding (x uniform)", "entropy (nats)", "wall",
                   "CPU, threads, precision, commit"]


def builtin_table() -> str:
    index = _read(f"{BUILTIN}/index.json")
    rows = []
    for run in index["runs"]:
        folder = f"{BUILTIN}/{run['name']}"
        if not (ROOT / folder / run["record"]).is_file():
            raise SystemExit(f"error: {folder}/{run['record']} is missing; {BUILTIN}/index.json lists it")
        r = _read(f"{folder}/{run['record']}")
        metric = [r.get(f"test/{k}") for k in ("bleu1", "bleu4", "cider", "attr_acc", "attr_acc_colour",
                                                "attr_acc_shape", "attr_acc_size", "attr_acc_position",
                                                "grounding_ratio", "attn_entropy")]
        wall = r.get("wall_time_s")
        threads = r.get("threads") and f"{r['threads']} thread{'s' if r['threads'] != 1 else ''}"
        where = ", ".join(str(x) for x in (r.get("machine"), threads, r.get("train_precision"),
                                           str(r.get("git_commit", ""))[:7]) if x)
        rows.append([f"`{run['command']}` ([record]({Path('..', folder, run['record']).as_posix()}))",
                     *[_f(v, 3) for v in metric[:-2]],
                     _f(metric[-2], 2), _f(metric[-1], 2),
                     f"{wall / 60:.1f} min" if wall else "", where or run.get("where", "")])
    return md_table(BUILTIN_COLUMNS, "l" + "r" * 11 + "l", rows)


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
    out[MODEL] = _filled(_filled((ROOT / MODEL).read_text(), "attention-modes", modes_table()),
                         "attention-zoo", zoo_table(_read(ZOO)))
    out[f"{BENCHMARK_CPU}.md"] = markdown(_read(f"{BENCHMARK_CPU}.json"))
    out[GPU_DOC] = _filled((ROOT / GPU_DOC).read_text(), "coco-estimate", coco_estimate())
    records = {record: measurement_table(record) for record in measurement_names()}
    for name in sorted({*out, *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))}):
        text = out.get(name, (ROOT / name).read_text())
        for record, table in records.items():
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
