"""The learning-rate sweep's report (compare.lrs): per decoder x dims x mode, each rate's best
validation score and its epoch, and the rate chosen, by validation alone. The test split is
not read: its scores are in the cells' results.json, never in this report."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from .cells import Cell, group_of

SPAN = 10.0  # a choice needs finished rates spanning this factor at least
MIN_RATES = 3


def leader(means: dict[float, float]) -> float:
    """The rate with the best mean score; a tie goes to the lower rate."""
    return max(means, key=lambda lr: (means[lr], -lr))


def choose(means: dict[float, float], lrs: list[float]) -> tuple[float | None, list[float]]:
    """A mode's rate from its finished rates' mean validation scores -> (chosen or None, the rates
    still needed to choose). The best finished rate is chosen once it is bracketed: the rates next
    to it in `lrs` have finished (an unrun neighbour could still beat it), and at
    least MIN_RATES rates spanning SPAN x have finished. Rates beyond a bracketed optimum are not
    needed (they could win only if the score had two peaks over the rates): every mode searches
    the same grid, and none trains cells that cannot change its choice. A tie goes to the lower
    rate (leader). Until then, the needed rates are the best's unfinished neighbours (else every
    unfinished rate)."""
    if not means:
        return None, sorted(lrs)
    best = leader(means)
    grid = sorted(set(lrs) | set(means))
    i = grid.index(best)
    neighbours = [lr for lr in grid[max(i - 1, 0):i + 2] if lr != best and lr in lrs]
    needed = [lr for lr in neighbours if lr not in means]
    span = max(means) / min(means)
    if not needed and len(means) >= MIN_RATES and span >= SPAN * (1 - 1e-9):
        return best, []
    return None, needed or sorted(lr for lr in lrs if lr not in means)


def sweep_report(dirs: dict[Cell, Path], lrs: list[float], cells: list[Cell] | None = None) -> dict:
    """dirs: the sweep's finished cells, lrs: the rates it tries, cells: all of its cells
    (finished or not; None: those of `dirs`) -> {"rows": [...], "rates": {"decoder/dims/mode":
    lr}}: a row per decoder x dims x mode with each rate's validation score (results.json
    best_score: the best validation of checkpoint.monitor) and best_epoch per seed; a mode's
    rate is the one with the best mean score over its seeds, chosen once it is bracketed
    (`choose`), with the rates still needed until then. A rate has a mean only once every seed
    the sweep gives it has finished: a choice never rests on some seeds at one rate and all at
    another (an unfinished seed keeps its rate needed). A choice at the lowest or highest rate
    tried is marked `edge`: the optimum may lie beyond the range, which should be extended
    before the rate is fixed."""
    seeds: dict[tuple, set[int]] = defaultdict(set)  # (decoder, dims, mode, lr): the seeds it needs
    for cell in cells if cells is not None else dirs:
        seeds[(cell.decoder, cell.dims, cell.attention, cell.lr)].add(cell.seed)
    groups: dict[tuple, dict[float, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for cell, out in dirs.items():
        res = json.loads((out / "results.json").read_text())
        groups[(cell.decoder, cell.dims, cell.attention)][cell.lr].append({
            "seed": cell.seed, "score": res.get("best_score"), "monitor": res.get("monitor"),
            "best_epoch": res.get("best_epoch"), "epochs": res.get("epochs_trained"),
            "stopped_early": res.get("stopped_early_after") is not None,
            "curve": [[e["epoch"], e.get(res.get("monitor"))] for e in res.get("val_curve", [])]})
    rows, rates = [], {}
    for (decoder, dims, mode), by_rate in sorted(groups.items()):
        means = {lr: sum(r["score"] for r in runs) / len(runs)
                 for lr, runs in by_rate.items() if all(r["score"] is not None for r in runs)
                 and {r["seed"] for r in runs} >= seeds[(decoder, dims, mode, lr)]}
        chosen, needed = choose(means, lrs)
        edge = None if chosen is None else (
            "lowest" if chosen == min(lrs) else "highest" if chosen == max(lrs) else None)
        rows.append({"decoder": decoder, "dims": dims, "attention": mode, "chosen": chosen,
                     "edge": edge, "needed": needed, "leading": leader(means) if means else None,
                     "means": {f"{lr:g}": m for lr, m in sorted(means.items())},
                     "rates": {f"{lr:g}": runs for lr, runs in sorted(by_rate.items())}})
        if chosen is not None:
            rates[f"{decoder}/{dims}/{mode}"] = chosen
    return {"rows": rows, "rates": rates}


def monitor_of(rows: list[dict]) -> str | None:
    """The validation metric sweep rows' runs were judged on (their checkpoint.monitor)."""
    return next((r["monitor"] for row in rows for runs in row["rates"].values() for r in runs
                 if r.get("monitor")), None)


def add_margins(report: dict, spread: dict[str, dict]) -> None:
    """Is a choice within seed noise? Adds to each row with a chosen rate its margin: the chosen
    rate's mean validation score minus the next best rate's, beside the std of such a difference
    between two runs that differ only in seed: sqrt(2) x the std of the validation score over
    the convergence grid's seeds at the chosen rate (`spread[group]`, a t_interval). A margin
    below it means another seed could have chosen the runner-up."""
    for row in report["rows"]:
        means = {float(lr): m for lr, m in row["means"].items()}
        if row["chosen"] is None or len(means) < 2:
            continue
        runner_up = leader({lr: m for lr, m in means.items() if lr != row["chosen"]})
        seeds = spread.get(group_of(row)) or {}
        std = seeds.get("std")
        row["margin"] = {"runner_up": runner_up, "diff": means[row["chosen"]] - means[runner_up],
                         "seed_std": std, "diff_std": None if std is None else math.sqrt(2) * std,
                         "seeds": seeds.get("n", 0)}


def _margin(row: dict) -> str:
    m = row.get("margin")
    if not m:
        return ""
    if not m["seeds"] or m["seeds"] < 2:
        return f"{m['diff']:+.4f} vs {m['runner_up']:g} (seed std: one seed so far)"
    within = " (within)" if m["diff"] < m["diff_std"] else ""
    return f"{m['diff']:+.4f} vs {m['runner_up']:g}; std {m['diff_std']:.4f}, {m['seeds']} seeds{within}"


def sweep_markdown(report: dict, lrs: list[float]) -> str:
    """The sweep's table: validation score (best epoch / epochs run) per rate, the chosen rate
    in bold, and the compare.rates block to commit."""
    margins = any("margin" in row for row in report["rows"])
    head = ("| decoder | dims | attention | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen |"
            + (" margin |" if margins else ""))
    lines = [head, "|" + "---|" * 3 + "---:|" * len(lrs) + "---|" + ("---|" if margins else "")]
    for row in report["rows"]:
        cells = []
        for lr in lrs:
            runs = row["rates"].get(f"{lr:g}")
            if not runs:
                cells.append("not needed" if row["chosen"] is not None else "not run")
                continue
            text = ", ".join(f"{r['score']:.4f} (ep {r['best_epoch']}/{r['epochs']})"
                             if r["score"] is not None else "no validation" for r in runs)
            cells.append(f"**{text}**" if row["chosen"] == lr else text)
        chosen = ("needs " + ", ".join(f"{lr:g}" for lr in row["needed"]) if row["chosen"] is None
                  else f"{row['chosen']:g}" + (f" ({row['edge']} tried)" if row["edge"] else ""))
        lines.append(f"| {row['decoder']} | {row['dims']} | {row['attention']} | " + " | ".join(cells)
                     + f" | {chosen} |" + (f" {_margin(row)} |" if margins else ""))
    monitor = monitor_of(report["rows"]) or "the monitored validation score"
    rates = "\n".join(f"    {k}: {v:g}" for k, v in sorted(report["rates"].items()))
    edges = [f"{group_of(r)} ({r['edge']})" for r in report["rows"] if r["edge"]]
    warning = ("\n\nAt the edge of the range tried (the optimum may lie beyond it: extend "
               "compare.lrs before fixing these rates): " + ", ".join(edges) + "." if edges else "")
    return ("Validation score per rate (" + monitor + "; greedy; best epoch / epochs run), "
            "chosen: the best (test never read), once the rates next to it have finished lower "
            f"and at least {MIN_RATES} rates spanning {SPAN:g}x have finished; a rate beyond a "
            "bracketed best is not needed." + (
                " Margin: the chosen rate's validation score minus the next best rate's, beside "
                "the std of such a difference between two runs that differ only in seed (sqrt(2) "
                "x the std of that score over the convergence grid's seeds at the chosen rate); "
                "\"within\": the margin is smaller than that std, another seed might have chosen "
                "the runner-up (the two rates are equally good, as far as this sweep can tell)."
                if margins else "") + "\n\n" + "\n".join(lines) + warning
            + "\n\nThe chosen rates, as `compare.rates` (conf/experiment/convergence.yaml):\n\n"
            + "```yaml\n  rates:\n" + rates + "\n```\n")
