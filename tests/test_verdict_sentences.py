"""The verdict's sentences are the committed report's, by one rule: each file's block between
the verdict markers is exactly what captioning.compare.verdict makes of the newest committed
convergence report.json (so a hand-edited or planted claim there fails), and the rule claims a
difference only where the seed interval excludes zero."""

from __future__ import annotations

import json
import math

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


@pytest.mark.parametrize("name", verdict.FILES)
def test_each_file_holds_the_generated_verdict(name, report):
    data, link = report
    text = (verdict.ROOT / name).read_text()
    assert verdict.MARK.search(text), f"{name}: no verdict markers"
    link = ("../" + link) if name.startswith("docs/") else link
    assert verdict.rendered(text, data, link) == text, (
        f"{name}: the verdict differs from the report's; run python -m captioning.compare.verdict")


@pytest.mark.parametrize("name", verdict.FILES)
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
