"""A grid's encoder file kept in its record (captioning/compare/encoder_record.py,
maint/encoder_record.py): stored in parts, put back byte for byte, and every way a record or
a machine can be wrong refused before a file is put in place."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import pytest

from captioning.compare.encoder_record import MANIFEST, restore, restore_if_recorded, store
from captioning.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("encoder_record", ROOT / "maint" / "encoder_record.py")
maint_record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(maint_record)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def recorded(tmp_path):
    """A 10,000-byte 'encoder' stored in 3,000-byte parts -> (its bytes, the record, a path
    where it is absent)."""
    data = os.urandom(10_000)
    weights = tmp_path / "made" / "encoder.pth"
    weights.parent.mkdir()
    weights.write_bytes(data)
    folder = tmp_path / "grid" / "encoder"
    store(weights, folder, _sha(data), part_bytes=3_000)
    return data, folder, tmp_path / "fresh" / "data" / "encoder.pth"


def test_the_file_comes_back_byte_for_byte(recorded):
    data, folder, target = recorded
    manifest = json.loads((folder / MANIFEST).read_text())
    assert [p["bytes"] for p in manifest["parts"]] == [3_000, 3_000, 3_000, 1_000]
    assert manifest["sha256"] == _sha(data) and manifest["file"] == "encoder.pth"
    assert "restored" in restore(folder, target, _sha(data))
    assert target.read_bytes() == data
    assert "already" in restore(folder, target, _sha(data))  # again: nothing to do
    assert sorted(p.name for p in target.parent.iterdir()) == ["encoder.pth"]  # no half-written file


def test_storing_again_replaces_the_parts(recorded, tmp_path):
    data, folder, _ = recorded
    weights = tmp_path / "made" / "encoder.pth"
    store(weights, folder, _sha(data), part_bytes=6_000)
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "encoder.pth.part00", "encoder.pth.part01"]


def test_a_file_other_than_the_pin_is_not_stored(tmp_path):
    weights = tmp_path / "encoder.pth"
    weights.write_bytes(b"trained again")
    with pytest.raises(UserError, match=r"encoder.pth: its sha256 is .*not the grid's pin 0{16}"):
        store(weights, tmp_path / "record", "0" * 64)
    assert not (tmp_path / "record").exists()


def test_a_damaged_or_missing_part_is_refused_and_nothing_is_left(recorded):
    data, folder, target = recorded
    part = folder / "encoder.pth.part01"
    good = part.read_bytes()
    part.write_bytes(bytes([good[0] ^ 1]) + good[1:])
    with pytest.raises(UserError, match=r"encoder.pth.part01: missing or not the recorded part"):
        restore(folder, target, _sha(data))
    part.unlink()
    with pytest.raises(UserError, match=r"encoder.pth.part01: missing"):
        restore(folder, target, _sha(data))
    assert list(target.parent.iterdir()) == []


def test_parts_that_do_not_make_the_file_are_refused(recorded):
    data, folder, target = recorded
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["parts"] = manifest["parts"][:-1]  # each listed part right, one left out
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="its parts do not make the recorded file"):
        restore(folder, target, _sha(data))
    assert not target.exists()


def test_a_grid_with_no_kept_file_says_how_to_keep_one(tmp_path):
    with pytest.raises(UserError, match=r"no encoder file kept there \(encoder.json\): store it from"):
        restore(tmp_path / "grid" / "encoder", tmp_path / "encoder.pth", "ab" * 32)


def test_a_record_of_another_file_than_the_pin_is_refused(recorded):
    _, folder, target = recorded
    with pytest.raises(UserError, match=r"records sha256 .*not the grid's pin abababab"):
        restore(folder, target, "ab" * 32)
    assert not target.exists()


def test_only_an_absent_or_other_file_calls_for_the_record(recorded):
    """Before a grid's cells: absent -> restored; the pinned file there -> nothing; another
    file there -> refused, never overwritten; no record, or no pin -> nothing."""
    data, folder, target = recorded
    encoder = {"pretrained": True, "weights_path": str(target), "weights_sha256": _sha(data)}
    assert "restored" in restore_if_recorded(encoder, folder)
    assert restore_if_recorded(encoder, folder) is None
    target.write_bytes(b"another encoder")
    with pytest.raises(UserError, match="other bytes than the recorded encoder.*move it aside"):
        restore_if_recorded(encoder, folder)
    assert target.read_bytes() == b"another encoder"
    target.unlink()
    assert restore_if_recorded(encoder, folder.parent / "nowhere") is None
    assert restore_if_recorded({**encoder, "weights_sha256": None}, folder) is None
    assert not target.exists()


def test_the_maintainer_command_reads_the_grids_pin():
    """maint/encoder_record.py finds the file and pin of experiment=<grid>; a preset without a
    pinned file is refused in one line."""
    encoder = maint_record.grid_encoder("convergence_learned")
    assert encoder["weights_path"].endswith("data/encoders/resnet50_builtin_cells.pth")
    assert len(encoder["weights_sha256"]) == 64
    with pytest.raises(UserError, match="experiment=convergence: no pinned weights file"):
        maint_record.grid_encoder("convergence")


def test_each_committed_record_keeps_its_grids_pinned_file():
    """A grid's committed record is the file its preset pins, whole: every part listed is there
    at its recorded size, and together they make the pinned sha256 (the test reads them all, so
    a record left behind by a pin moved to another file fails here, not on a fresh clone)."""
    manifests = sorted(ROOT.glob(f"results/*/encoder/{MANIFEST}"))
    if not manifests:
        pytest.skip("no grid keeps its encoder file in its record")
    for manifest_path in manifests:
        grid = manifest_path.parent.parent.name
        manifest = json.loads(manifest_path.read_text())
        assert manifest["sha256"] == maint_record.grid_encoder(grid)["weights_sha256"], grid
        whole = hashlib.sha256()
        for part in manifest["parts"]:
            data = (manifest_path.parent / part["name"]).read_bytes()
            assert len(data) == part["bytes"] and _sha(data) == part["sha256"], part["name"]
            whole.update(data)
        assert whole.hexdigest() == manifest["sha256"], grid
        listed = {p["name"] for p in manifest["parts"]} | {MANIFEST}
        assert {f.name for f in manifest_path.parent.iterdir()} == listed, f"{grid}: files not in the record"
