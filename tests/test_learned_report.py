"""experiment=convergence_learned's report path, run before its grid has finished: every cell of
its sweep and grid filled with a committed learned cell's files (its scores set per cell), then
the report-only command. Its sweep chooses each mode's rate inside the range, and the report holds
what the learned verdict needs: the encoder check, the sweep, the rows, the width's interaction,
the learned-projection control, the cost per part and the encoder file of every cell."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from captioning.compare import verdict
from captioning.compare.grid import grid_runner
from captioning.compare.run import _plan
from captioning.schema import completed, register
from captioning.schema.compare import Compare

ROOT = Path(__file__).resolve().parents[1]
# each mode's validation peak (log10 of the rate): inside the swept range, not all at one rate
PEAK = {"additive": -3.0, "dot": -2.5, "scaled_dot": -2.5, "general": -3.0}


def _template() -> Path:
    """A committed learned cell, or before the grid has one a committed random-feature cell of
    experiment=convergence (the same files, under the same rules)."""
    for grid in ("convergence_learned", "convergence"):
        ls = subprocess.run(["git", "ls-files", f"results/{grid}/cells/*/results.json"], cwd=ROOT,
                            capture_output=True, text=True)
        if ls.returncode == 0 and ls.stdout.split():
            return ROOT / Path(ls.stdout.split()[0]).parent
    pytest.skip("no committed convergence cell (or not a git checkout)")


def _pin() -> str:
    """The encoder file's sha256 the preset pins: the one file every cell reads."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=["experiment=convergence_learned"]).encoder.weights_sha256


def _fill(root: Path, overrides: list[str]) -> dict[str, float]:
    """Every cell of the sweep, then of the grid at the rates it chose, finished with the
    template's files -> the rates chosen."""
    template, rng = _template(), random.Random(0)
    base = {**json.loads((template / "results.json").read_text()), "encoder_sha256": _pin()}
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("compare", overrides=overrides)
        spec = completed(OmegaConf.to_container(cfg.compare, resolve=True), Compare, "compare.")
        runner = grid_runner(spec, lambda extra: compose("train", overrides=extra), overrides)
        plan = _plan(spec, runner)

        def finish(cell) -> None:
            out = runner.directory(cell)
            out.mkdir(parents=True)
            val = 0.70 - 0.03 * (math.log10(cell.lr) - PEAK[cell.attention]) ** 2 + rng.gauss(0, 0.002)
            at = {k: {**v, "test/bleu4": val - 0.05 + rng.gauss(0, 0.01)}
                  for k, v in base["at_epoch"].items()}
            (out / "results.json").write_text(json.dumps({
                **base, "seed": cell.seed, "best_score": val, "at_epoch": at,
                "test/bleu4": val + rng.gauss(0, 0.01), "test/cider": 3.5 + rng.gauss(0, 0.1)}))
            for name in ("predictions.json", "predictions_epoch2.json", "predictions_epoch5.json"):
                shutil.copy(template / name, out / name)

        for cell in plan.sweep:
            finish(cell)
        rates = plan.rates()
        for cell in plan.rated():
            finish(cell)
    GlobalHydra.instance().clear()
    return rates


def test_the_learned_grids_report_holds_what_its_verdict_needs(tmp_path):
    overrides = ["experiment=convergence_learned", f"compare.root={tmp_path}"]
    rates = _fill(tmp_path, overrides)
    assert len(rates) == 7 and all(r in (1e-3, 3e-3) for r in rates.values())
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "scripts/compare.py", *overrides, "compare.train=false",
                          "compare.sweep.train=true", "logger=csv"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    (folder,) = (tmp_path / "convergence_learned").glob("20*")
    report = json.loads((folder / "report.json").read_text())
    text = (folder / "report.md").read_text()
    assert report["encoder_check"] and "### The encoder check" in text
    # what the features are, said plainly, before anything else (the preset's compare.features)
    assert text.split("\n\n")[1].startswith("**Features.** every cell reads a ResNet-50 trained from random")
    assert "a stand-in for ImageNet features, not ImageNet features" in text
    assert all(row["chosen"] is not None and row["edge"] is None for row in report["sweep"]["rows"])
    assert {(r["dims"], r["attention"]) for r in report["rows"]} == {
        ("matched", m) for m in ("additive", "dot", "scaled_dot", "general")} | {
        ("mismatched_whitened", m) for m in ("additive", "dot", "scaled_dot")}
    assert all(len(r["seeds"]) == 5 for r in report["rows"])
    assert {(i["a"], i["b"]) for i in report["interactions"]} == {
        ("additive", "dot"), ("additive", "scaled_dot")}
    assert [(c["a"], c["a_dims"], c["b"], c["b_dims"]) for c in report["controls"]] == [
        ("general", "matched", "dot", "matched"), ("general", "matched", "dot", "mismatched_whitened")]
    # the sweep: 7 rates x 7 modes x seeds 5, 6; the grid: 7 modes x seeds 0-4
    assert sum(p["cells"] for p in report["cost"]) == report["runs"] == 7 * 7 * 2 + 35
    # every cell read the one encoder file, and the provenance table names it
    (row,) = report["provenance"]
    assert row["encoder_sha256"] == _pin()
    headline = verdict.sentences(report, headline=True)
    assert 3 <= len(headline) <= 8 and all("Transformer" not in s for s in headline)
    control = [s for s in headline if s.startswith("The learned-projection control (lstm): ")]
    assert [s.split(": ")[1].split(" is ")[0] for s in control] == [
        "general at 512-d − dot at 512-d", "general at 512-d − dot at 2048-d"]
