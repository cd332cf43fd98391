"""The convergence report's figures, validation score per epoch: learning_curves.png (the grid,
a line per mode, mean over seeds) and sweep_curves.png (the learning-rate sweep, a line per rate:
was the chosen rate ahead for many epochs, or at one lucky validation?)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from .sweep import monitor_of


def _panels(n: int, width: float = 5.2, height: float = 3.8):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return plt, fig, list(axes.flat)[:n]


def _best(curve: list[list]) -> tuple[int, float] | None:
    """The epoch and score of a curve's best validation (the first of equal ones: best.ckpt's)."""
    scored = [(e, s) for e, s in curve if s is not None]
    return max(scored, key=lambda es: (es[1], -es[0])) if scored else None


def _save(plt, fig, out: Path, name: str, footnote: str) -> Path:
    fig.text(0.01, 0.005, footnote, fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = out / name
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def save_curves(report: dict, out: Path) -> Path:
    """learning_curves.png: validation BLEU-4 per epoch, one panel per decoder x dims, a line per
    mode (mean over the seeds still training at that epoch) with a min-max band over seeds, and
    each seed's best epoch marked."""
    panels = sorted({tuple(k.split("/")[:2]) for k in report["curves"]})
    modes = list(dict.fromkeys(k.split("/")[2] for k in report["curves"]))
    plt, fig, axes = _panels(len(panels))
    for ax, (decoder, dims) in zip(axes, panels):
        for k, mode in enumerate(modes):
            seeds = report["curves"].get(f"{decoder}/{dims}/{mode}")
            if not seeds:
                continue
            by_epoch = defaultdict(list)
            for curve in seeds.values():
                for epoch, score in curve:
                    if score is not None:
                        by_epoch[epoch].append(score)
                if best := _best(curve):
                    ax.plot(*best, marker="o", ms=3, color=f"C{k}", alpha=0.7)
            epochs = sorted(by_epoch)
            ax.plot(epochs, [np.mean(by_epoch[e]) for e in epochs], color=f"C{k}",
                    label=f"{mode} ({len(seeds)} seeds)")
            ax.fill_between(epochs, [min(by_epoch[e]) for e in epochs], [max(by_epoch[e]) for e in epochs],
                            color=f"C{k}", alpha=0.15)
        ax.set_title(f"{decoder}, {dims}", fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylabel("validation BLEU-4 (greedy)")
        ax.legend(fontsize=7)
    return _save(plt, fig, out, "learning_curves.png", "line: mean over the seeds still training; "
                 "band: min-max over them; dots: each seed's best epoch (its best.ckpt)")


def save_sweep_curves(sweep: dict, out: Path) -> Path | None:
    """sweep_curves.png: the sweep's validation score per epoch, one panel per decoder x dims x
    mode, a line per rate (each seed's run; the chosen rate's drawn thick), each run's best epoch
    marked. None when no sweep run recorded a curve."""
    rows = [r for r in sweep["rows"] if any(run.get("curve") for runs in r["rates"].values() for run in runs)]
    if not rows:
        return None
    rates = sorted({float(lr) for r in rows for lr in r["rates"]})
    plt, fig, axes = _panels(len(rows), width=4.6, height=3.4)
    for ax, row in zip(axes, rows):
        for lr_text, runs in sorted(row["rates"].items(), key=lambda kv: float(kv[0])):
            lr = float(lr_text)
            chosen = row["chosen"] == lr
            colour = f"C{rates.index(lr)}"
            for n, run in enumerate(runs):
                curve = run.get("curve") or []
                ax.plot([e for e, s in curve if s is not None], [s for _, s in curve if s is not None],
                        color=colour, lw=2.2 if chosen else 1.0, alpha=1.0 if chosen else 0.8,
                        label=(f"lr {lr_text}" + (" (chosen)" if chosen else "")) if n == 0 else None)
                if best := _best(curve):
                    ax.plot(*best, marker="o", ms=3, color=colour)
        ax.set_title(f"{row['decoder']}, {row['dims']}, {row['attention']}", fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"validation {(monitor_of([row]) or 'score').removeprefix('val/')}", fontsize=8)
        ax.legend(fontsize=7)
    return _save(plt, fig, out, "sweep_curves.png", "a line per rate and seed (thick: the rate "
                 "chosen); dots: each run's best epoch; test never read")

