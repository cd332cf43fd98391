"""The reports' figures: bars of the cells' scores per mode and width (bleu4.png, attr_acc.png,
grounding.png), and the convergence report's validation score per epoch: learning_curves.png (the grid,
a line per mode, mean over seeds) and sweep_curves.png (the learning-rate sweep, a line per rate:
was the chosen rate ahead for many epochs, or at one lucky validation?)."""

from __future__ import annotations

import math
import textwrap
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


def save_plots(report: dict, out: Path, prefix: str = "") -> list[Path]:
    """bleu4.png, attr_acc.png, grounding.png: bars per attention x dims, one panel per
    decoder; error bars = 95% CI over the counted seeds (t), cut at the metric's bounds (said on
    the figure); a group with undertrained seeds is hatched and labelled with its count, one with
    none counted is drawn as an empty hatched bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    decoders = sorted({r["decoder"] for r in rows})
    dims = list(dict.fromkeys(r["dims"] for r in rows))
    modes = list(dict.fromkeys(r["attention"] for r in rows))
    bounds = {"bleu4": (0.0, 1.0), "attr_acc": (0.0, 1.0), "grounding_ratio": (0.0, None)}
    paths = []
    for key, title, unit in (("bleu4", "test BLEU-4", "BLEU-4 (0-1)"),
                             ("attr_acc", "attribute accuracy", "share of images (0-1)"),
                             ("grounding_ratio", "attention in box / uniform", "x uniform")):
        panel_w = max(6.0, 0.45 * len(modes) + 2.0)  # many modes need room for their names
        fig, axes = plt.subplots(1, len(decoders), figsize=(panel_w * len(decoders), 4.4), squeeze=False)
        lo_bound, hi_bound = bounds[key]
        clipped = False
        for ax, dec in zip(axes[0], decoders):
            width = 0.8 / max(1, len(dims))
            for j, dim in enumerate(dims):
                x = np.arange(len(modes)) + j * width
                for k, m in enumerate(modes):
                    r = next((r for r in rows
                              if (r["decoder"], r["dims"], r["attention"]) == (dec, dim, m)), None)
                    if r is None:
                        continue
                    ci = r[key] if r["counted"] else {"mean": math.nan, "lo": math.nan, "hi": math.nan}
                    under = len(r["undertrained"])
                    mean = 0.0 if math.isnan(ci["mean"]) else ci["mean"]
                    err = None
                    if not math.isnan(ci["lo"]):
                        lo = ci["lo"] if lo_bound is None else max(ci["lo"], lo_bound)
                        hi = ci["hi"] if hi_bound is None else min(ci["hi"], hi_bound)
                        clipped |= (lo, hi) != (ci["lo"], ci["hi"])
                        err = [[mean - lo], [hi - mean]]
                    ax.bar(x[k], mean, width, yerr=err, capsize=3, color=f"C{j}",
                           hatch="//" if under else None, edgecolor="black" if under else None,
                           label=dim if k == 0 else None)
                    if under:
                        ax.annotate(f"{under} under-\ntrained", (x[k], mean), ha="center",
                                    va="bottom", fontsize=6)
            ax.set_xticks(np.arange(len(modes)) + width * (len(dims) - 1) / 2, modes, rotation=35,
                          ha="right", rotation_mode="anchor")
            ax.set_ylabel(unit)
            ax.set_xlabel("attention mode")
            ax.set_title(f"{dec}: {title}")
            ax.legend(fontsize=8, title="features", title_fontsize=8, loc="upper left",
                      bbox_to_anchor=(1.0, 1.0))
        note = ("bars: mean over counted seeds; error bars: 95% CI over seeds (t); hatched: some "
                f"seeds undertrained (< blind + {report['undertrained_margin']:.2f} BLEU-4), not counted")
        if clipped:
            note += "; intervals cut at the metric's bounds"
        fig.text(0.01, 0.01, "\n".join(textwrap.wrap(note, 60 + 70 * (len(decoders) - 1))), fontsize=7)
        fig.tight_layout(rect=(0, 0.09, 1, 1))
        path = out / f"{prefix}{key.split('_')[0] if key != 'attr_acc' else key}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths
