"""The verdict's sentences are the committed report's, by one rule: each file's block between
the verdict markers is exactly what captioning.compare.verdict makes of the newest committed
convergence report.json (so a hand-edited or planted claim there fails), and the rule claims a
difference only where the seed interval excludes zero."""

from __future__ import annotations

import json
import math
import re

import pytest

from captioning.compare import verdict


def _diff(mean: float, seeds: tuple[float, float], images: tuple[float, float], n: int = 5) -> dict:
    return {"seeds": n, "ci": {"mean": mean, "lo": seeds[0], "hi": seeds[1]}, "boot": list(images)}


def test_the_rule_claims_only_what_the_seed_interval_shows():
    assert verdict.judged(_diff(0.03, (0.01, 0.05), (0.02, 0.04)), "a − b") == \
        "a − b is +0.030 ([+0.010, +0.050] over 5 seeds)"
    on_models = verdict.judged(_diff(0.016, (-0.006, 0.037), (0.006, 0.025)), "a − b")
    assert "on these trained models" in on_models and "span zero" in on_models
    tie = verdict.judged(_diff(0.0, (-0.022, 0.023), (-0.011, 0.010)), "a − b")
    assert tie == "a − b is not distinguishable from zero (within ±0.023, 5 seeds)"
    one_seed = verdict.judged(_diff(0.01, (math.nan, math.nan), (-0.01, 0.02), n=1), "a − b")
    assert "not distinguishable" in one_seed


@pytest.fixture(scope="module")
def report() -> tuple[dict, str]:
    path = verdict.newest_report()
    if path is None:
        pytest.skip("no committed convergence report (or not a git checkout)")
    return json.loads(path.read_text()), str(path.parent.relative_to(verdict.ROOT) / "report.md")


# The files that hold the random-feature grid's verdict (results/convergence/); verdict.FILES also
# names docs/learned_features.md, the home of the learned grid's verdict once its report is
# committed (until then it holds none, and the prose checks below still read it).
RANDOM_VERDICT = ("README.md", "docs/summary.md", "docs/comparison.md")


@pytest.mark.parametrize("name", RANDOM_VERDICT)
def test_each_file_holds_the_generated_verdict(name, report):
    data, link = report
    text = (verdict.ROOT / name).read_text()
    assert verdict.MARK.search(text), f"{name}: no verdict markers"
    link = ("../" + link) if name.startswith("docs/") else link
    assert verdict.rendered(text, data, link) == text, (
        f"{name}: the verdict differs from the report's; run python -m captioning.compare.verdict")


@pytest.mark.parametrize("name", RANDOM_VERDICT)
def test_a_planted_overclaim_fails(name, report):
    data, link = report
    link = ("../" + link) if name.startswith("docs/") else link
    text = (verdict.ROOT / name).read_text()
    planted = text.replace("additive − scaled_dot is not distinguishable from zero",
                           "additive beats scaled_dot", 1)
    assert planted != text
    assert verdict.rendered(planted, data, link) != planted


def test_the_detectable_difference_comes_from_the_seeds_spread(report):
    data, _ = report
    x = verdict.detectable(data)
    halves = [(g["stages"]["best"]["ci"]["hi"] - g["stages"]["best"]["ci"]["lo"]) / 2
              for g in data["gaps"] if g["decoder"] == "lstm" and len(g["seeds"]) >= 5]
    assert min(halves) <= x <= max(halves)


# The modes the study compares, as prose names them ("scaled dot", `general`); the registry's
# other names double as English words ("local", "linear") and are not the verdict's subject.
MODE = re.compile(r"\b(?:un)?scaled[ _]dot\b|\bgated_mixed\b|\badditive\b|\bdot\b|\bmixed\b|`general`", re.I)
# a measured figure: a score or difference with two or more decimals, or a signed or decimal
# percentage (not the "95%" of an interval)
FIGURE = re.compile(r"\d\.\d{2,}|[+−-]\d+(?:\.\d+)?\s?%|\d\.\d\s?%")


def prose_claims(text: str) -> list[str]:
    """Paragraphs outside the verdict blocks, tables and code that name two of the compared modes
    and state a measured figure: each one a measured difference between modes in a sentence
    that no rule generated."""
    text = verdict.MARK.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found = []
    # a paragraph, or one item of a list
    for para in re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.) )", text):
        lines = [ln for ln in para.splitlines() if not ln.lstrip().startswith("|")]
        body = " ".join(lines)
        modes = {m.group(0).strip("`").lower().replace("_", " ").removeprefix("un")
                 for m in MODE.finditer(body)}
        if len(modes) >= 2 and FIGURE.search(body):
            found.append(body[:160])
    return found


@pytest.mark.parametrize("name", verdict.FILES)
def test_no_sentence_outside_the_markers_states_a_difference(name):
    """Outside the generated blocks a measured difference between modes stands only in a table
    (the tables are checked number by number against their report.json)."""
    claims = prose_claims((verdict.ROOT / name).read_text())
    assert not claims, f"{name}: measured differences in prose (put them in a report):\n" + "\n".join(claims)


@pytest.mark.parametrize("name", verdict.FILES)
def test_a_planted_prose_claim_outside_the_markers_fails(name):
    text = (verdict.ROOT / name).read_text()
    planted = text + "\n\nAt 2048-d additive beats dot by 0.016 BLEU-4.\n"
    assert prose_claims(planted) == prose_claims(text) + ["At 2048-d additive beats dot by 0.016 BLEU-4."]
    assert prose_claims(text + "\n\nAdditive is ahead of scaled dot by 2.5 % at 512-d.\n")


def test_cider_stands_beside_bleu_by_the_seed_rule(report):
    """The report's CIDEr-D gap is the paired difference of the rows' CIDEr-D (same seeds), and
    the sentence states it by the seed interval alone."""
    data, _ = report
    rows = {(r["decoder"], r["dims"], r["attention"]): r for r in data["rows"]}
    checked = 0
    for g in data["gaps"]:
        a, b = rows.get((g["decoder"], g["a_dims"], g["a"])), rows.get((g["decoder"], g["b_dims"], g["b"]))
        ci = g["stages"]["best"]["cider"]
        if a and b and a["seeds"] == b["seeds"] == g["seeds"]:
            assert math.isclose(ci["mean"], a["cider"]["mean"] - b["cider"]["mean"], abs_tol=1e-9)
            checked += 1
    assert checked >= 4
    d = _diff(0.01, (-0.01, 0.03), (-0.01, 0.02)) | {"cider": {"mean": 0.2, "lo": 0.1, "hi": 0.3}}
    assert verdict.judged(d, "a − b").endswith(", in CIDEr-D +0.200 ([+0.100, +0.300])")
    d["cider"] = {"mean": 0.02, "lo": -0.1, "hi": 0.14}
    assert verdict.judged(d, "a − b").endswith(", in CIDEr-D not distinguishable (within ±0.140)")


def test_the_readme_holds_the_headline_and_the_docs_every_sentence(report):
    """README.md: the question's own sentences (the LSTM at 512-d and 2048-d, the width's
    interaction, the seeds' limit), each of them one of the full verdict's."""
    data, _ = report
    headline, full = verdict.sentences(data, headline=True), verdict.sentences(data)
    assert set(headline) < set(full) and len(headline) <= 8
    assert all("Transformer" not in s and "native512" not in s for s in headline)
    readme = (verdict.ROOT / "README.md").read_text()
    assert "<!-- verdict:convergence:headline -->" in readme
    assert all(s in readme for s in headline) and not any(s in readme for s in set(full) - set(headline))
