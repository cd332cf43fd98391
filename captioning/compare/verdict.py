"""The verdict's sentences, made from a convergence report's numbers by one rule, so that no
sentence claims more than its interval supports:

- a difference is claimed only where its 95% interval over seeds excludes zero;
- where only the interval over test images does, the sentence says "on these trained models"
  (that interval holds the trained models fixed: another set of seeds may differ);
- otherwise the two are "not distinguishable (within ±x)", x the larger end of the seed interval.

The sentences stand in README.md and docs between `<!-- verdict:GRID -->` and
`<!-- /verdict:GRID -->` (every sentence), or `<!-- verdict:GRID:headline -->` and its closing
marker (the question's own: the LSTM at 512-d and 2048-d, the width's interaction, what the
seeds can detect); GRID is a convergence grid's results folder (`convergence`: random-encoder
features, `convergence_learned`: learned ones), and each block is made from that grid's newest
committed report alone, so two grids' numbers never meet in one sentence.
`python -m captioning.compare.verdict` writes them, and tests/test_verdict_sentences.py checks
them byte for byte.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = ("README.md", "docs/summary.md", "docs/comparison.md", "docs/learned_features.md")
BEST = "best"


def _seed_ci(d: dict) -> tuple[float, float]:
    return d["ci"]["lo"], d["ci"]["hi"]


def judged(d: dict, what: str) -> str:
    """One difference `what` ("additive − dot") at convergence, stated by the rule."""
    (lo, hi), (blo, bhi) = _seed_ci(d), d["boot"]
    mean = d["ci"]["mean"]
    seeds = f"[{lo:+.3f}, {hi:+.3f}] over {d['seeds']} seeds"
    if not math.isnan(lo) and (lo > 0 or hi < 0):
        return f"{what} is {mean:+.3f} ({seeds})" + cider(d)
    if blo > 0 or bhi < 0:
        return (f"{what} is {mean:+.3f} on these trained models (images [{blo:+.3f}, {bhi:+.3f}]; "
                f"seeds {seeds.split(' over ')[0]} span zero)") + cider(d)
    within = max(abs(lo), abs(hi)) if not math.isnan(lo) else float("nan")
    return f"{what} is not distinguishable from zero (within ±{within:.3f}, {d['seeds']} seeds)" + cider(d)


def cider(d: dict) -> str:
    """The same difference in CIDEr-D, by the seed rule alone (the report has no image interval
    for it); empty where the report lacks it."""
    ci = d.get("cider")
    if not ci or math.isnan(ci["lo"]):
        return ""
    if ci["lo"] > 0 or ci["hi"] < 0:
        return f", in CIDEr-D {ci['mean']:+.3f} ([{ci['lo']:+.3f}, {ci['hi']:+.3f}])"
    return f", in CIDEr-D not distinguishable (within ±{max(abs(ci['lo']), abs(ci['hi'])):.3f})"


def detectable(report: dict) -> float | None:
    """The smallest paired difference 5 seeds resolve, from the seeds' spread: the half-width of
    the seed interval of the headline gaps (the LSTM's additive − dot and − scaled dot at each
    width, at convergence), their median."""
    widths = sorted((g["stages"][BEST]["ci"]["hi"] - g["stages"][BEST]["ci"]["lo"]) / 2
                    for g in report["gaps"] if g["decoder"] == "lstm" and g["stages"].get(BEST)
                    and len(g["seeds"]) >= 5)
    return widths[len(widths) // 2] if widths else None


NAMES = {"matched": "512-d (the top 512 components)", "mismatched_whitened": "2048-d (all of them)",
         "native512": "a ResNet-18's own 512 channels", "grid7": "a 7x7 grid of 2048-d keys",
         "query_projected": "2048-d with the query projected up instead of the keys down"}


HEADLINE = ("matched", "mismatched_whitened")  # the widths the question is about
WIDTH = {"matched": "512-d", "mismatched_whitened": "2048-d"}


def sentences(report: dict, headline: bool = False) -> list[str]:
    """The verdict at convergence: per condition the LSTM's contrasts, each interaction, the
    Transformer's contrasts, the learned-projection control where the report has it, and what
    the seeds can detect; every difference by `judged`. headline: only the LSTM at the HEADLINE
    widths, their interaction and the control."""
    out = []
    by_dims: dict[tuple[str, str], list[str]] = {}
    for g in report["gaps"]:
        d = g["stages"].get(BEST)
        if d is None or (headline and (g["decoder"] != "lstm" or g["dims"] not in HEADLINE)):
            continue
        what = (f"{g['a']} − {g['b']}" if g["a"] != g["b"]
                else f"{g['a']} − {g['b']} on {g['b_dims']}'s key projection")
        by_dims.setdefault((g["decoder"], g["dims"]), []).append(judged(d, what))
    for (decoder, dims), parts in by_dims.items():
        who = "the LSTM" if decoder == "lstm" else f"the {decoder.capitalize()}"
        out.append(f"At {NAMES.get(dims, dims)}, {who}'s BLEU-4 " + "; ".join(parts) + ".")
    for i in report["interactions"]:
        d = i["stages"].get(BEST)
        asked = i["decoder"] == "lstm" and set(i["conditions"]) <= set(HEADLINE)
        if d is not None and (asked or not headline):
            first, second = i["conditions"]
            out.append(f"How {first} rather than {second} changes {i['a']} − {i['b']} "
                       f"({i['decoder']}): " + judged(d, "the change") + ".")
    for c in report.get("controls", []):  # the learned-projection control (compare.controls)
        d = c["stages"].get(BEST)
        if d is not None and (c["decoder"] == "lstm" or not headline):
            a, b = (f"{c[k]} at {WIDTH.get(c[f'{k}_dims'], c[f'{k}_dims'])}" for k in ("a", "b"))
            what = f"{a} − {b}"
            out.append(f"The learned-projection control ({c['decoder']}): " + judged(d, what) + ".")
    if (x := detectable(report)) is not None:
        out.append(f"With 5 seeds a paired difference smaller than about ±{x:.3f} BLEU-4 cannot be "
                   "told from zero (the median half-width of the 5-seed intervals).")
    return out


def block(report: dict, link: str, headline: bool = False) -> str:
    """What stands between the markers: the sentences and the report they come from."""
    return "\n".join(f"- {s}" for s in sentences(report, headline)) + (
        f"\n\nGenerated from [the report]({link}) by `python -m captioning.compare.verdict`: a "
        "difference is claimed only where its 95% interval over seeds excludes zero; \"on these "
        "trained models\": only the interval over test images does.")


# groups: 1 the opening marker, 2 the grid, 3 ":headline" or "", 4 the block, 5 the closing marker
MARK = re.compile(r"(<!-- verdict:(convergence\w*)(:headline|) -->)(.*?)(<!-- /verdict:\2\3 -->)", re.S)


def newest_report(root: Path = ROOT, grid: str = "convergence") -> Path | None:
    """The newest committed report.json of the grid under results/<grid>/ (None: none yet)."""
    ls = subprocess.run(["git", "ls-files", f"results/{grid}/*/report.json"], cwd=root,
                        capture_output=True, text=True)
    found = sorted(f for f in ls.stdout.split() if "/cells/" not in f and "/sweep_" not in f)
    return root / found[-1] if found else None


def rendered(text: str, report: dict, link: str, grid: str = "convergence") -> str:
    """`text` with every verdict block of `grid` replaced by the sentences of `report`."""
    return MARK.sub(lambda m: m.group(1) + "\n" + block(report, link, bool(m.group(3))) + "\n" + m.group(5)
                    if m.group(2) == grid else m.group(0), text)


def generated(root: Path = ROOT) -> dict[str, str]:
    """{file: its text with each grid's verdict blocks made from that grid's newest committed
    report}; empty when no file has a block. A block whose grid has no committed report is
    an error (it would stand unchecked)."""
    texts = {name: (root / name).read_text() for name in FILES}
    grids = sorted({m.group(2) for text in texts.values() for m in MARK.finditer(text)})
    for grid in grids:
        path = newest_report(root, grid)
        if path is None:
            raise ValueError(f"a verdict:{grid} block, but no committed report under results/{grid}/: "
                             f"build it (python scripts/compare.py experiment={grid} compare.train=false) "
                             "and commit it, or remove the block")
        report = json.loads(path.read_text())
        link = str(path.parent.relative_to(root) / "report.md")
        texts = {name: rendered(text, report, ("../" if name.startswith("docs/") else "") + link, grid)
                 for name, text in texts.items()}
    return texts if grids else {}


def main() -> int:
    try:
        texts = generated()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not texts:
        print("no verdict block in " + ", ".join(FILES), file=sys.stderr)
        return 1
    for name, new in texts.items():
        if new != (ROOT / name).read_text():
            (ROOT / name).write_text(new)
            print(f"{name}: verdict rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
