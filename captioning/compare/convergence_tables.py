"""The convergence report's Markdown (compare/convergence.py makes its numbers): the rows at
convergence, the gaps per stage in BLEU-4 and CIDEr-D, the conditions' interactions, the
learned-projection control, every difference per seed, the provenance and the compute; and
`difference_table`, through which the docs quote a report without typing a number."""

from __future__ import annotations

import math
from collections.abc import Callable

from .convergence import BEST
from .provenance_table import provenance_markdown
from .report import throughput_markdown


def _ci(ci: dict, digits: int = 3) -> str:
    if ci is None or ci.get("n", 0) == 0 or math.isnan(ci["mean"]):
        return ""
    if math.isnan(ci["std"]):
        return f"{ci['mean']:.{digits}f}"
    return f"{ci['mean']:.{digits}f} ± {ci['std']:.{digits}f}"


def _diff(d: dict | None) -> str:
    """+0.012 [seed CI] / [image CI]; bold when both intervals exclude zero."""
    if d is None:
        return "not reached"
    ci, (lo, hi) = d["ci"], d["boot"]
    seed = "" if math.isnan(ci["lo"]) else f" [{ci['lo']:+.3f}, {ci['hi']:+.3f}]"
    text = f"{ci['mean']:+.3f}{seed} / [{lo:+.3f}, {hi:+.3f}]"
    clear = not math.isnan(ci["lo"]) and (ci["lo"] > 0 or ci["hi"] < 0) and (lo > 0 or hi < 0)
    return f"**{text}**" if clear else text


def convergence_markdown(report: dict, figure: str | None = None) -> str:
    """The report's Markdown; `figure`: the learning-curve image beside it (curves.save_curves)."""
    snaps = [s for s in report["stages"] if s != BEST]
    lines = ["### At convergence", "",
             "Test split, best-validation checkpoint, the base config's decoding. BLEU-4 mean ± std "
             "over seeds; 95% CI over seeds (t) and over test images (bootstrap, "
             f"{report['bootstrap_samples']} resamples); " + ", ".join(f"after {s} epochs" for s in snaps)
             + ": the same runs' snapshots, tested alike; best epoch: mean (range) of the epoch "
             "best.ckpt is from; stopped: runs ended by early stopping / all; wait: the most "
             "validations in a row without a new best that a new best still followed (over seeds; "
             "early stopping's patience must exceed it).", "",
             "| decoder | dims | attention | lr | BLEU-4 | 95% CI seeds | 95% CI images | CIDEr-D | "
             + " | ".join(f"after {s} ep" for s in snaps)
             + " | best epoch | stopped | wait | attr acc | entropy |",
             "|---|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(snaps) + "---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        b, (lo, hi) = r["bleu4"], r["bleu4_boot"]
        seed_ci = "" if math.isnan(b["lo"]) else f"[{b['lo']:.3f}, {b['hi']:.3f}]"
        rng = r["best_epoch_range"]
        epoch = "" if rng is None else f"{r['best_epoch']['mean']:.1f} ({rng[0]}-{rng[1]})"
        lines.append(f"| {r['decoder']} | {r['dims']} | {r['attention']} | "
                     f"{', '.join(f'{x:g}' for x in r['lr']) or 'base'} | {_ci(b)} | {seed_ci} | "
                     f"[{lo:.3f}, {hi:.3f}] | {_ci(r.get('cider'))} | "
                     + " | ".join(_ci(r["at_epoch"][s]) for s in snaps)
                     + f" | {epoch} | {r['stopped_early']}/{len(r['seeds'])} | {r['longest_wait']} | "
                     f"{_ci(r['attr_acc'])} | "
                     f"{_ci(r['attn_entropy'], 2)} |")
    if figure:
        lines += ["", f"![validation BLEU-4 per epoch, mean over seeds]({figure})"]
    stages = report["stages"]
    if report["gaps"]:
        lines += _stage_table(
            "The gap after a fixed budget and at convergence",
            "BLEU-4 difference, paired by seed: mean [95% CI over seeds] / [95% CI over test "
            "images]; bold: both exclude zero.", ["decoder", "dims", "difference", "seeds"],
            [(_gap_cells(g) + [str(len(g["seeds"]))], g["stages"]) for g in report["gaps"]], stages)
        lines += _stage_table(
            "The gap in CIDEr-D", "The same differences in CIDEr-D (coco-caption's, as each run "
            "scored its test captions): mean [95% CI over seeds]; bold: it excludes zero. (No "
            "image interval: CIDEr-D's IDF weights come from the whole test set.)",
            ["decoder", "dims", "difference", "seeds"],
            [(_gap_cells(g) + [str(len(g["seeds"]))], g["stages"]) for g in report["gaps"]], stages,
            cell=_cider_diff)
    if report["interactions"]:
        lines += _stage_table(
            "Condition x mode: does the condition change the gap?",
            "(gap in the first condition) − (gap in the second), paired by seed (the seeds both "
            "ran): mean [95% CI over seeds] / [95% CI over test images]. Positive: the mode's "
            "advantage is larger in the first. mismatched_whitened − matched is the width (the "
            "same ResNet-50 features, all 2048 whitened components or the top 512).",
            ["decoder", "conditions", "gap", "seeds"],
            [(_interaction_cells(i) + [str(len(i["seeds"]))], i["stages"])
             for i in report["interactions"]], stages)
    if report.get("controls"):
        rows = [(_gap_cells(g) + [str(len(g["seeds"]))], g["stages"]) for g in report["controls"]]
        lines += _stage_table(
            "The learned-projection control",
            "A mode in one condition against another mode in another, paired by seed: BLEU-4 "
            "mean [95% CI over seeds] / [95% CI over test images]; bold: both exclude zero. At "
            "2048-d every dot-product mode learns a 2048→512 map of the keys; `general` learns "
            "a map at 512-d (q^T W k). general − dot at 512-d is what a learned map does at one "
            "width; general (512-d) − dot (2048-d), both with a learned map, is the width alone.",
            ["decoder", "dims", "difference", "seeds"], rows, stages)
        lines += ["", "The same in CIDEr-D (mean [95% CI over seeds]):", "",
                  *_differences(["decoder", "dims", "difference", "seeds"], rows, stages, _cider_diff)]
    if report["gaps"] or report["interactions"]:
        lines += _per_seed_table(report)
    every = " (the grid's cells and its sweep's, each once)" if "sweep" in report else ""
    lines += ["", "### Provenance", "", "Each cell's own record (results.json): the commit it ran, "
              "its torch threads, the machine(s) it trained on, its training precision, the grid "
              f"whose results root holds it{every}.", "", *provenance_markdown(report["provenance"])]
    lines += throughput_markdown(report.get("throughput") or {})
    lines += ["", f"Compute: {report['runs']} runs{every}, {report['cpu_h']:.2f} CPU core-hours (each "
              "run's cpu_s); per part:", "", "| decoder | features | cells of | runs | CPU core-hours |",
              "|---|---|---|---:|---:|"]
    lines += [f"| {p['decoder']} | {p['dims']} | {p['role']} | {p['cells']} | {p['cpu_h']:.2f} |"
              for p in report.get("cost", [])]
    return "\n".join(lines) + "\n"


def _contrast(gap: dict) -> str:
    """"additive − dot", naming a side's condition where it is not the row's ("additive
    (mismatched_whitened) − dot": a mode borrowed from the condition on the same features)."""
    def side(key: str) -> str:
        dims = gap.get(f"{key}_dims", gap["dims"])
        return gap[key] if dims == gap["dims"] else f"{gap[key]} ({dims})"

    return f"{side('a')} − {side('b')}"


def _gap_cells(gap: dict) -> list[str]:
    """A gap's row label as every table prints it (and the docs quote it): decoder, dims, contrast."""
    return [gap["decoder"], gap["dims"], _contrast(gap)]


def _interaction_cells(inter: dict) -> list[str]:
    """An interaction's row label: decoder, "first − second" condition, the gap it differences."""
    return [inter["decoder"], " − ".join(inter["conditions"]), f"{inter['a']} − {inter['b']}"]


def _per_seed_table(report: dict) -> list[str]:
    """Every difference above, seed by seed: whether a mean is carried by one seed shows here,
    and every per-seed number the docs quote has its source."""
    entries = [(_gap_cells(g), g) for g in report["gaps"] + report.get("controls", [])]
    entries += [(_interaction_cells(i), i) for i in report["interactions"]]
    seeds = sorted({s for _, e in entries for s in e["seeds"]})
    lines = ["", "### Per seed", "", "The differences of the two tables above, each seed's own "
             "(seed s of one side against seed s of the other); blank: a seed that side has not run.",
             "", "| decoder | dims or conditions | difference | stage | "
             + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|---|---|---|" + "---:|" * len(seeds)]
    for cells, entry in entries:
        for stage in report["stages"]:
            d = entry["stages"][stage]
            if d is None:
                continue
            by_seed = dict(zip(entry["seeds"], d["per_seed"]))
            name = "at convergence" if stage == BEST else f"after {stage} epochs"
            lines.append("| " + " | ".join(cells + [name] + [
                f"{by_seed[s]:+.3f}" if s in by_seed else "" for s in seeds]) + " |")
    return lines


def _cider_diff(d: dict | None) -> str:
    """+0.12 [seed CI] of a paired difference's CIDEr-D; bold when the interval excludes zero."""
    ci = (d or {}).get("cider")
    if ci is None:
        return "not reached" if d is None else ""
    if math.isnan(ci["lo"]):
        return f"{ci['mean']:+.3f}"
    text = f"{ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}]"
    return f"**{text}**" if ci["lo"] > 0 or ci["hi"] < 0 else text


def _stage_table(title: str, about: str, heads: list[str], rows: list[tuple[list[str], dict]],
                 stages: list[str], cell: Callable[[dict | None], str] | None = None) -> list[str]:
    """A table of paired differences under its heading: the row's own columns, then one per
    stage (snapshot epochs, then convergence)."""
    return ["", f"### {title}", "", about, "", *_differences(heads, rows, stages, cell)]


def _differences(heads: list[str], rows: list[tuple[list[str], dict]], stages: list[str],
                 cell: Callable[[dict | None], str] | None = None) -> list[str]:
    names = [f"after {s} epochs" if s != BEST else "at convergence" for s in stages]
    lines = ["| " + " | ".join(heads + names) + " |",
             "|" + "---|" * (len(heads) - 1) + "---:|" * (1 + len(names))]
    for cells, by_stage in rows:
        lines.append("| " + " | ".join(cells + [(cell or _diff)(by_stage[s]) for s in stages]) + " |")
    return lines


def difference_table(report: dict, groups: list[tuple[str, str]]) -> str:
    """The report's BLEU-4 differences whose (decoder, dims) or (decoder, "first − second"
    conditions) is in `groups`, group by group in that order, as the report's own table prints
    them: how the docs quote a report without typing a number."""
    entries = [(_gap_cells(g), g) for g in report["gaps"]]
    entries += [(_interaction_cells(i), i) for i in report["interactions"]]
    rows = [(cells + [str(len(e["seeds"]))], e["stages"])
            for group in groups for cells, e in entries if tuple(cells[:2]) == group]
    if missing := [g for g in groups if not any(tuple(c[:2]) == g for c, _ in entries)]:
        raise ValueError(f"the report has no differences for {missing}")
    return "\n".join(_differences(["decoder", "dims", "difference", "seeds"], rows, report["stages"]))
