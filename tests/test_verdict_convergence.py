"""The verdict at convergence comes from the committed report: every gap and difference of
differences quoted in a table of the README or docs (a table with an "at convergence" column,
rows as the report prints them) equals the newest committed results/convergence/*/report.json,
rounded as printed, and the text links that report, not an older one. A table between another
grid's markers (`<!-- figures:convergence_learned-width -->`) is that grid's: checked against
its own newest report, never the random-feature one."""

import json
import math
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "docs/summary.md", "docs/comparison.md"]
LINK = re.compile(r"results/convergence/(\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d)/report\.md")
NUMBER = r"([+-]\d+\.\d{3})"
# "+0.040 [+0.021, +0.060] / [+0.018, +0.061]" (the seed interval absent with one seed), maybe bold
DIFF = re.compile(rf"^\**{NUMBER}(?: \[{NUMBER}, {NUMBER}\])? / \[{NUMBER}, {NUMBER}\]\**$")


# another convergence grid's tables: `<!-- figures:GRID-KIND -->` ... its closing marker
OTHER_GRID = re.compile(r"<!-- figures:(convergence_\w+)-([\w-]+) -->.*?<!-- /figures:\1-\2 -->", re.S)


def _newest_report(grid: str = "convergence") -> Path | None:
    ls = subprocess.run(["git", "ls-files", f"results/{grid}"], cwd=ROOT, capture_output=True, text=True)
    link = re.compile(LINK.pattern.replace("results/convergence/", f"results/{grid}/"))
    reports = sorted(f for f in ls.stdout.split() if link.fullmatch(f))
    return ROOT / reports[-1].replace("report.md", "report.json") if reports else None


def _by_grid(text: str) -> dict[str, str]:
    """{grid: the parts of `text` whose tables quote it}: each other grid's figures blocks, and
    the rest for the random-feature grid (`convergence`)."""
    parts: dict[str, str] = {}
    for m in OTHER_GRID.finditer(text):
        parts[m.group(1)] = parts.get(m.group(1), "") + m.group(0) + "\n"
    return {"convergence": OTHER_GRID.sub("", text), **parts}


def _label(entry: dict, row_dims: str) -> str:
    def side(key: str) -> str:
        dims = entry.get(f"{key}_dims", row_dims)
        return entry[key] if dims == row_dims else f"{entry[key]} ({dims})"

    return f"{side('a')} − {side('b')}"


def _quoted(report: dict) -> dict[tuple[str, str, str], dict]:
    """(decoder, dims or "wide − narrow", difference) -> the entry's stages, as the report's tables
    name them."""
    out = {(g["decoder"], g["dims"], _label(g, g["dims"])): g for g in report["gaps"]}
    out |= {(i["decoder"], " − ".join(i["conditions"]), f"{i['a']} − {i['b']}"): i
            for i in report["interactions"]}
    return out


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Markdown tables with an "at convergence" column: (header, rows)."""
    out, lines = [], text.splitlines()
    for k, line in enumerate(lines):
        if line.startswith("|") and "at convergence" in line and k + 1 < len(lines) and "---" in lines[k + 1]:
            rows = []
            for body in lines[k + 2:]:
                if not body.startswith("|"):
                    break
                rows.append([c.strip() for c in body.strip().strip("|").split("|")])
            out.append(([c.strip() for c in line.strip().strip("|").split("|")], rows))
    return out


def _check(text: str, report: dict, stages: list[str]) -> int:
    """Every number of every convergence table in `text` against the report -> cells checked."""
    quoted, checked = _quoted(report), 0
    names = {("at convergence" if s == "best" else f"after {s} epochs"): s for s in stages}
    for header, rows in _tables(text):
        for row in rows:
            entry = quoted.get(tuple(row[:3]))
            assert entry is not None, f"row {row[:3]} is not in the report (its gaps or interactions)"
            assert row[3] == str(len(entry["seeds"])), (row[:3], "seeds")
            for title, cell in zip(header[4:], row[4:]):
                d = entry["stages"][names[title]]
                if d is None:
                    assert cell == "not reached", (row[:3], title)
                    continue
                match = DIFF.match(cell)
                assert match, (row[:3], title, cell)
                ci, boot = d["ci"], d["boot"]
                want = [ci["mean"], ci["lo"], ci["hi"], *boot]
                got = [None if x is None else float(x) for x in match.groups()]
                for g, w in zip(got, want):
                    assert (g is None) == math.isnan(w), (row[:3], title, cell)
                    assert g is None or g == round(w, 3), (row[:3], title, cell)
                checked += 1
    return checked


def test_every_number_in_the_convergence_verdict_is_the_reports():
    path = _newest_report()
    if path is None:
        pytest.skip("no committed convergence report yet (or not a git checkout)")
    report = json.loads(path.read_text())
    checked = 0
    for doc in DOCS:
        for grid, text in _by_grid((ROOT / doc).read_text()).items():
            if not _tables(text):
                continue
            if grid != "convergence":
                other = _newest_report(grid)
                assert other is not None, f"{doc} quotes results/{grid}/, which has no committed report"
                _check(text, json.loads(other.read_text()), report["stages"])
                continue
            links = set(LINK.findall(text))
            assert links == {path.parent.name}, f"{doc}: link the newest committed report, {path.parent.name}"
            checked += _check(text, report, report["stages"])
    assert checked >= 3  # a table of gaps is quoted somewhere (a rewrite that drops it fails here)


def test_another_grids_table_is_not_checked_against_the_random_features_report():
    """A table between figures:convergence_learned-* markers goes to that grid, and only it."""
    table = ("| decoder | dims | difference | seeds | at convergence |\n|---|---|---|---:|---:|\n"
             "| x | y | z | 5 | +0.100 / [+0.050, +0.150] |\n")
    mark = "figures:convergence_learned-width"
    text = f"intro\n\n<!-- {mark} -->\n{table}<!-- /{mark} -->\n\nend\n"
    parts = _by_grid(text)
    assert _tables(parts["convergence_learned"]) and not _tables(parts["convergence"])


def test_the_convergence_check_fails_on_a_changed_number():
    """Negative control: one quoted number changed by 0.001 is caught."""
    path = _newest_report()
    if path is None:
        pytest.skip("no committed convergence report yet (or not a git checkout)")
    report = json.loads(path.read_text())
    doc = next(d for d in DOCS if _tables((ROOT / d).read_text()))
    text = (ROOT / doc).read_text()
    header, rows = _tables(text)[0]
    cell = next(c for c in rows[0][4:] if DIFF.match(c))
    number = DIFF.match(cell).group(1)
    bumped = f"{float(number) + 0.001:+.3f}"
    changed = text.replace(cell, cell.replace(number, bumped, 1), 1)
    assert changed != text
    with pytest.raises(AssertionError):
        _check(changed, report, report["stages"])
