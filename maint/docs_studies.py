"""The docs' tables of the attention study (`make docs`, via maint/make_docs.py): docs/model.md's
table of attention modes from the registry, docs/summary.md's fixed-budget grid, the tables of
differences each convergence grid's newest committed report gives README.md and
docs/comparison.md, docs/learned_features.md's encoder check, and docs/results.md's runs on the
built-in data."""

from __future__ import annotations

import re
from pathlib import Path

import docs_records as records
from docs_records import MARK, ROOT, cost_table, fmt, md_table

from captioning.compare import verdict


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
    # the same without the Transformer's row: a grid of the LSTM alone (convergence_learned)
    "width_lstm": [("lstm", "matched"), ("lstm", "mismatched_whitened"),
                   ("lstm", "mismatched_whitened − matched")],
    "conditions": [("lstm", "native512"), ("lstm", "native512 − matched"),
                   ("lstm", "mismatched_whitened − native512"), ("lstm", "grid7"),
                   ("lstm", "grid7 − mismatched_whitened"), ("lstm", "query_projected")],
}


COMPARISON = "docs/comparison.md"
LEARNED = "docs/learned_features.md"


QUOTING = ("README.md", COMPARISON, LEARNED)


def encoder_check_doc() -> str:
    """docs/learned_features.md's `figures:encoder-check`: the learned grid's encoder check, the
    table its report opens with, from the folder its preset names (compare.encoder_check)."""
    from omegaconf import OmegaConf

    from captioning.compare.encoder_check import encoder_check, encoder_check_table

    folder = OmegaConf.load(ROOT / "conf/experiment/convergence_learned.yaml").compare.encoder_check
    return encoder_check_table(encoder_check(ROOT / folder), folder)


GRID_MARK = re.compile(r"(convergence\w*)-(\w+)")  # a marker's name: the grid, the table kind


def report_tables(text: str, grid: str, report: dict) -> str:
    """`text` with its `figures:GRID-KIND` tables of `grid` made from `report`; KIND: a table
    of REPORT_TABLES (a difference table; a group the report lacks is refused), or `cost`."""
    from captioning.compare.convergence_tables import difference_table

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
        return f"{m.group(1)}\n{difference_table(report, REPORT_TABLES[kind])}\n{m.group(4)}"

    return MARK.sub(table, text)


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
    index = records.read(f"{BUILTIN}/index.json")
    rows = []
    for run in index["runs"]:
        folder = f"{BUILTIN}/{run['name']}"
        if not (ROOT / folder / run["record"]).is_file():
            raise SystemExit(f"error: {folder}/{run['record']} is missing; {BUILTIN}/index.json lists it")
        r = records.read(f"{folder}/{run['record']}")
        metric = [r.get(f"test/{k}") for k in ("bleu1", "bleu4", "cider", "attr_acc", "attr_acc_colour",
                                                "attr_acc_shape", "attr_acc_size", "attr_acc_position",
                                                "grounding_ratio", "attn_entropy")]
        wall = r.get("wall_time_s")
        threads = r.get("threads") and f"{r['threads']} thread{'s' if r['threads'] != 1 else ''}"
        where = ", ".join(str(x) for x in (r.get("machine"), threads, r.get("train_precision"),
                                           str(r.get("git_commit", ""))[:7]) if x)
        rows.append([f"`{run['command']}` ([record]({Path('..', folder, run['record']).as_posix()}))",
                     *[fmt(v, 3) for v in metric[:-2]],
                     fmt(metric[-2], 2), fmt(metric[-1], 2),
                     f"{wall / 60:.1f} min" if wall else "", where or run.get("where", "")])
    return md_table(BUILTIN_COLUMNS, "l" + "r" * 11 + "l", rows)
