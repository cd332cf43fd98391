"""The learning-rate sweep's report (compare.lrs): per decoder x dims x mode, each rate's best
validation score and its epoch, and the rate chosen, by validation alone. The test split is
not read: its scores are in the cells' results.json, never in this report."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .grid import Cell


def sweep_report(dirs: dict[Cell, Path], lrs: list[float]) -> dict:
    """dirs: the sweep's finished cells, lrs: the rates it tries -> {"rows": [...], "rates":
    {"decoder/dims/mode": lr}}: a row per decoder x dims x mode with each rate's validation
    score (results.json best_score: the best validation of checkpoint.monitor) and best_epoch
    per seed; a mode's rate is the one with the best mean score over its seeds, chosen only once
    every rate has a score (a choice among some rates would change as the others finish). A
    choice at the lowest or highest rate tried is marked `edge`: the optimum may lie beyond
    the range, which should be extended before the rate is fixed."""
    groups: dict[tuple, dict[float, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for cell, out in dirs.items():
        res = json.loads((out / "results.json").read_text())
        groups[(cell.decoder, cell.dims, cell.attention)][cell.lr].append({
            "seed": cell.seed, "score": res.get("best_score"), "monitor": res.get("monitor"),
            "best_epoch": res.get("best_epoch"), "epochs": res.get("epochs_trained"),
            "stopped_early": res.get("stopped_early_after") is not None})
    rows, rates = [], {}
    for (decoder, dims, mode), by_rate in sorted(groups.items()):
        means = {lr: sum(r["score"] for r in runs) / len(runs)
                 for lr, runs in by_rate.items() if all(r["score"] is not None for r in runs)}
        complete = all(lr in means for lr in lrs)
        chosen = max(means, key=lambda lr: (means[lr], -lr)) if complete and means else None
        edge = None if chosen is None else (
            "lowest" if chosen == min(lrs) else "highest" if chosen == max(lrs) else None)
        rows.append({"decoder": decoder, "dims": dims, "attention": mode, "chosen": chosen,
                     "edge": edge, "rates": {f"{lr:g}": runs for lr, runs in sorted(by_rate.items())}})
        if chosen is not None:
            rates[f"{decoder}/{dims}/{mode}"] = chosen
    return {"rows": rows, "rates": rates}


def sweep_markdown(report: dict, lrs: list[float]) -> str:
    """The sweep's table: validation score (best epoch / epochs run) per rate, the chosen rate
    in bold, and the compare.rates block to commit."""
    head = "| decoder | dims | attention | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen |"
    lines = [head, "|" + "---|" * 3 + "---:|" * len(lrs) + "---|"]
    for row in report["rows"]:
        cells = []
        for lr in lrs:
            runs = row["rates"].get(f"{lr:g}")
            if not runs:
                cells.append("not run")
                continue
            text = ", ".join(f"{r['score']:.4f} (ep {r['best_epoch']}/{r['epochs']})"
                             if r["score"] is not None else "no validation" for r in runs)
            cells.append(f"**{text}**" if row["chosen"] == lr else text)
        chosen = ("waiting for every rate" if row["chosen"] is None else f"{row['chosen']:g}"
                  + (f" ({row['edge']} tried)" if row["edge"] else ""))
        lines.append(f"| {row['decoder']} | {row['dims']} | {row['attention']} | " + " | ".join(cells)
                     + f" | {chosen} |")
    monitor = next((r["monitor"] for row in report["rows"] for runs in row["rates"].values()
                    for r in runs if r.get("monitor")), "the monitored validation score")
    rates = "\n".join(f"    {k}: {v:g}" for k, v in sorted(report["rates"].items()))
    edges = [f"{r['decoder']}/{r['dims']}/{r['attention']} ({r['edge']})" for r in report["rows"]
             if r["edge"]]
    warning = ("\n\nAt the edge of the range tried (the optimum may lie beyond it: extend "
               "compare.lrs before fixing these rates): " + ", ".join(edges) + "." if edges else "")
    return ("Validation score per rate (" + monitor + "; greedy; best epoch / epochs run), "
            "chosen: the best (test never read).\n\n" + "\n".join(lines) + warning
            + "\n\nThe chosen rates, as `compare.rates` (conf/experiment/convergence.yaml):\n\n"
            + "```yaml\n  rates:\n" + rates + "\n```\n")
