"""The gallery's files: index.html (every entry written out, so it reads without JavaScript and
an HTML parser can check it), gallery.css and gallery.js (sorting, filtering, paging, the
attention view), data.js (the attention weights the page draws). Everything that came from
users' data (captions, file names, config values, run names) is escaped here, once."""

from __future__ import annotations

import json
import math
import shutil
from html import escape
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"


def _e(value) -> str:
    return escape(str(value), quote=True)


def _num(value: float | None, digits: int = 3) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _ci(pair) -> str:
    return f"[{pair[0]:.3f}, {pair[1]:.3f}]" if pair else ""


def _summary(summary: dict) -> str:
    rows = []
    for row, run in zip(summary["corpus"], summary["runs"]):
        diff = ""
        if "bleu4_minus_first_ci" in row:
            diff = f"{_ci(row['bleu4_minus_first_ci'])} / {_ci(row['cider_minus_first_ci'])}"
        notes = [run["note"]] if run["note"] else []
        if run["redecoded_differs"]:
            notes.append(f"{run['redecoded_differs']} caption(s) re-decoded here differ from the run's "
                         "(another machine): their attention is marked")
        rows.append(f"<tr><th>{_e(row['run'])}</th><td>{_num(row['bleu4'])} {_ci(row['bleu4_ci'])}</td>"
                    f"<td>{_num(row['cider'])} {_ci(row['cider_ci'])}</td><td>{_e(diff)}</td>"
                    f"<td>{_e(run['folder'])}</td><td>{_e('; '.join(notes))}</td></tr>")
    differs = "".join(f"<tr><th>{_e(k)}</th>" + "".join(f"<td>{_e(json.dumps(v, default=str))}</td>"
                                                         for v in values) + "</tr>"
                      for k, values in summary["differs"].items()) or "<tr><td>none</td></tr>"
    heads = "".join(f"<th>{_e(r['name'])}</th>" for r in summary["runs"])
    return (f"<section id='summary'><h1>{len(summary['runs'])} runs, {summary['images']} "
            f"{_e(summary['split'])} images</h1>"
            "<table class='corpus'><tr><th>run</th><th>BLEU-4 [95% CI]</th><th>CIDEr-D [95% CI]</th>"
            "<th>minus the first run: BLEU-4 / CIDEr-D [95% CI]</th><th>folder</th><th>notes</th></tr>"
            + "".join(rows) + "</table><p class='how'>BLEU-4: corpus nltk BLEU on the project's tokens "
            "(the training metric); CIDEr-D: mean of the per-image coco-caption scores; intervals: "
            "bootstrap over the images (1,000 draws, one draw for all runs). Per image: coco-caption "
            "BLEU-4 and CIDEr-D (scripts/score.py --per-image gives the same numbers).</p>"
            f"<details class='differs'{' open' if len(summary['differs']) <= 12 else ''}><summary>"
            f"{len(summary['differs'])} config keys differ between the runs</summary>"
            f"<table class='differs'><tr><th>key</th>{heads}</tr>{differs}</table></details></section>")


def _caption(run: dict) -> str:
    bad = set((run["errors"] or {}).get("words", []))
    return " ".join(f"<span class='w{' bad' if t in bad else ''}'>{_e(w)}</span>"
                    for t, w in enumerate(run["words"]))


def _entry(row: dict, names: list[str]) -> str:
    data = {}
    cells = []
    for j, (run, name) in enumerate(zip(row["runs"], names)):
        errors = run["errors"]
        wrong = [a for a, bad in (errors or {}).get("attributes", {}).items() if bad]
        data.update({f"data-bleu4-{j}": _num(run["bleu4"], 6), f"data-cider-{j}": _num(run["cider"], 6),
                     f"data-err-{j}": len(wrong), f"data-len-{j}": len(run["words"])})
        marks = f"<span class='errs'>wrong: {_e(', '.join(wrong))}</span>" if wrong else ""
        cells.append(f"<tr class='run' data-run='{j}'><th>{_e(name)}</th><td class='caption'>"
                     f"{_caption(run)} {marks}</td><td class='bleu4'>{_num(run['bleu4'])}</td>"
                     f"<td class='cider'>{_num(run['cider'])}</td></tr>")
    attrs = " ".join(f"{k}='{_e(v)}'" for k, v in data.items())
    refs = "".join(f"<li>{_e(r)}</li>" for r in row["refs"])
    return (f"<article class='entry' id='e{row['k']}' data-k='{row['k']}' {attrs}>"
            f"<img class='photo' src='{_e(row['image'])}' alt='{_e(row['file'])}' loading='lazy'>"
            f"<div class='meta'><div class='file'>{_e(row['file'])} · image id {_e(row['image_id'])}</div>"
            f"<table class='runs'><tr><th>run</th><th>caption</th><th>BLEU-4</th><th>CIDEr-D</th></tr>"
            + "".join(cells) + f"</table><details class='refs'><summary>references ({len(row['refs'])})"
            f"</summary><ol>{refs}</ol></details>"
            "<button class='show-attention' type='button'>attention per word</button></div>"
            "<div class='attention' hidden></div></article>")


def _controls(names: list[str], page_size: int) -> str:
    options = "".join(f"<option value='{j}'>{_e(n)}</option>" for j, n in enumerate(names))
    second = "".join(f"<option value='{j}'{' selected' if j == 1 else ''}>{_e(n)}</option>"
                     for j, n in enumerate(names))
    return ("<nav id='controls'>"
            "<label>sort <select id='sort'><option value='diff'>score of A minus B</option>"
            "<option value='errors'>attribute errors (A + B)</option><option value='length'>caption "
            "length (A)</option><option value='order'>image order</option></select></label>"
            "<label>score <select id='metric'><option value='bleu4'>BLEU-4</option><option "
            "value='cider'>CIDEr-D</option></select></label>"
            f"<label>A <select id='run-a'>{options}</select></label>"
            f"<label>B <select id='run-b'>{second}</select></label>"
            "<label>order <select id='direction'><option value='desc'>largest first</option>"
            "<option value='asc'>smallest first</option></select></label>"
            "<label><input type='checkbox' id='only-errors'> only attribute errors</label>"
            f"<span class='pager'><button id='prev' type='button'>previous</button> <span id='page'>"
            f"</span> <button id='next' type='button'>next</button> ({page_size} a page)</span></nav>")


def write_page(out: Path, summary: dict, entries: list[dict], page_size: int = 50) -> Path:
    """index.html + assets + data.js in `out` (images already there)."""
    names = [r["name"] for r in summary["runs"]]
    for asset in ("gallery.css", "gallery.js"):
        shutil.copyfile(ASSETS / asset, out / asset)
    cells = [len(w[0]) for row in entries for run in row["runs"] if (w := run["weights"])]
    data = {"runs": names, "page_size": page_size, "cells": cells[0] if cells else 0,
            "attention": {row["k"]: [{"words": run["attention_words"], "weights": run["weights"],
                                      "differs": run["attention_words"] is not None
                                      and " ".join(run["attention_words"]) != run["caption"]}
                                     for run in row["runs"]] for row in entries}}
    # A script, not a JSON file: pages opened from disk may not fetch() files, but may load scripts.
    (out / "data.js").write_text("window.GALLERY = " + json.dumps(data, ensure_ascii=True,
                                                                  separators=(",", ":")) + ";\n")
    html = ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>gallery: {_e(' vs '.join(names))}</title><link rel='stylesheet' href='gallery.css'>"
            "</head><body>" + _summary(summary) + _controls(names, page_size)
            + "<main id='entries'>" + "".join(_entry(row, names) for row in entries) + "</main>"
            "<script src='data.js'></script><script src='gallery.js'></script></body></html>")
    (out / "index.html").write_text(html, encoding="utf-8")
    return out / "index.html"
