"""A committed cell keeps its identity: its record (cell.json) hashes to its directory's name under
the current code, its own preset still finds it, and a config under a newer rule
(provenance.RULES) never takes it for its own."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import captioning.provenance as provenance
from captioning.compare.cells import Cell
from captioning.compare.grid import GridRunner
from captioning.provenance import fingerprint

ROOT = Path(__file__).resolve().parents[1]


def _committed_records() -> list[Path]:
    ls = subprocess.run(["git", "ls-files", "results/*/cells/*/cell.json"], cwd=ROOT,
                        capture_output=True, text=True)
    return [ROOT / f for f in ls.stdout.split()] if ls.returncode == 0 else []


def test_every_committed_cell_is_named_by_its_record():
    records = _committed_records()
    if not records:
        pytest.skip("no committed cells (or not a git checkout)")
    wrong = [str(r.parent.relative_to(ROOT)) for r in records
             if fingerprint(json.loads(r.read_text())) != r.parent.name]
    assert not wrong, (f"{len(wrong)} cell(s) not named by their cell.json "
                       f"(maint/name_cells_by_record.py): {wrong[:3]}")


def _compose(experiment: str):
    def make(overrides: list[str]):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return compose("compare", overrides=[f"experiment={experiment}", *overrides])
    return make


# The committed convergence grid's first cell (results/convergence, report row lstm/matched/additive)
CELL = Cell("lstm", "matched", "additive", 0, 3e-3)


@pytest.fixture
def committed_root(tmp_path) -> Path:
    """A copy of the committed convergence grid's records (cell.json, results.json)."""
    cells = sorted({r.parent for r in _committed_records() if r.parts[-4] == "convergence"})
    if not cells:
        pytest.skip("no committed convergence cells (or not a git checkout)")
    for cell in cells:
        (tmp_path / "cells" / cell.name).mkdir(parents=True)
        for name in ("cell.json", "results.json"):
            shutil.copy(cell / name, tmp_path / "cells" / cell.name / name)
    return tmp_path


def _runner(root: Path, extra: list[str]) -> GridRunner:
    make = _compose("convergence_unpaired")
    dims = OmegaConf.to_container(make([]).compare.dim_settings)
    return GridRunner(make, extra, root, dims)


def test_its_own_preset_finds_a_committed_cell_and_a_newer_rule_does_not(committed_root, monkeypatch):
    found = _runner(committed_root, []).finished([CELL])
    assert list(found) == [CELL]
    for rule in ("decoder.paired_init=true", "early_stopping.smoothing=3"):
        assert _runner(committed_root, [rule]).finished([CELL]) == {}, rule
    # the control: without the rules table the old cell is taken for the new rule's run
    monkeypatch.setattr(provenance, "RULES", {})
    import captioning.compare.adoption as adoption
    monkeypatch.setattr(adoption, "with_rules", lambda flat: flat)
    assert list(_runner(committed_root, ["decoder.paired_init=true"]).finished([CELL])) == [CELL]


def test_every_rule_has_the_old_value_in_the_presets_of_the_committed_grids():
    """The committed grids' presets pin each rule at the value their cells ran under."""
    for experiment in ("cross_modal", "attention_zoo", "convergence_unpaired"):
        cfg = _compose(experiment)([])
        for key, old in provenance.RULES.items():
            assert OmegaConf.select(cfg, key) == old, (experiment, key)


def test_the_learned_feature_preset_finds_each_of_its_committed_cells(monkeypatch):
    """experiment=convergence_learned's cells are trained at a pinned commit while the code goes
    on: the current code must still compose each of them to its committed directory, or its
    report would not find them. The encoder file itself may be absent (the grid's record puts it
    back only before training): its fingerprint is the one the records hold."""
    records = [r for r in _committed_records() if r.parts[-4] == "convergence_learned"]
    if not records:
        pytest.skip("no committed learned-feature cells (or not a git checkout)")
    weights = {json.loads(r.read_text())["encoder"]["weights_path"] for r in records}
    assert len(weights) == 1, f"the learned grid's cells read {len(weights)} encoder files"
    real = provenance.file_fingerprint
    monkeypatch.setattr(provenance, "file_fingerprint", lambda path: next(iter(weights))
                        if str(path).endswith("resnet50_builtin_cells.pth") else real(path))
    from captioning.compare.cells import expand_grid
    from captioning.schema import completed
    from captioning.schema.compare import Compare

    make = _compose("convergence_learned")
    spec = completed(OmegaConf.to_container(make([]).compare, resolve=True), Compare, "compare.")
    runner = GridRunner(make, [], ROOT / "results" / "convergence_learned",
                        OmegaConf.to_container(make([]).compare.dim_settings))
    # every cell it may train: the sweep's, and the grid's seeds at each of the sweep's rates
    cells = expand_grid({**spec, **spec["sweep"]}) + expand_grid({**spec, "lrs": spec["sweep"]["lrs"]})
    names = {runner.directory(c).name for c in cells}
    lost = [r.parent.name for r in records if r.parent.name not in names]
    assert not lost, f"{len(lost)} committed learned cell(s) the preset no longer composes to: {lost[:3]}"
