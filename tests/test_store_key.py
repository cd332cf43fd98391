"""A feature store that survives a move: keyed by the images (relative paths, sizes), encoder,
weights, image size and precision, never by where the folder is or what the captions say.
Stores made under the old key are adopted; a store of the other precision is reused under
encoder.precision=auto and extracted anew when a precision is forced."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from captioning.data.features import dtype_name, extraction_dtype
from captioning.data.prepare import usable_data
from captioning.provenance import fingerprint
from captioning.schema import Karpathy, ResNet, completed

ENC = {"name": "resnet18", "image_size": 64, "batch_size": 8, "num_workers": 0, "device": "cpu",
       "pretrained": False, "init_seed": 0, "precision": "auto"}
ENC = completed(ENC, ResNet)  # every other encoder setting at its default


def _dataset(root: Path) -> Path:
    (root / "images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    images = []
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)).save(root / "images" / f"{i}.png")
        images.append({"filename": f"{i}.png", "filepath": "images", "imgid": i,
                       "split": "train" if i < 8 else "val" if i < 10 else "test",
                       "sentences": [{"raw": f"a picture number {i}"}]})
    (root / "dataset.json").write_text(json.dumps({"images": images}))
    return root / "dataset.json"


def _data_cfg(json_path: Path, cache: Path) -> dict:
    return completed({"name": "mine", "format": "karpathy", "json_path": str(json_path), "min_word_freq": 1,
                      "image_root": str(json_path.parent), "cache_dir": str(cache)}, Karpathy)


def _digest(path: Path) -> str:
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


def _extracted(caplog) -> bool:
    return any("features: extracting" in r.getMessage() for r in caplog.records)


def test_moved_touched_and_recaptioned_data_reuses_the_store(tmp_path, monkeypatch, caplog):
    from conftest import TINY, compose_cfg, shrink

    from captioning.lit import train

    caplog.set_level(logging.INFO, logger="captioning")
    cache = tmp_path / "cache"
    first = usable_data(_data_cfg(_dataset(tmp_path / "here"), cache), ENC)
    assert _extracted(caplog)
    store, digest = first.features.path, _digest(first.features.path)

    # Moved elsewhere (as to a cluster's scratch disk), the JSON touched, another working dir.
    moved = tmp_path / "elsewhere" / "data"
    shutil.move(str(tmp_path / "here"), str(moved))
    os.utime(moved / "dataset.json", (1e9, 1e9))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    caplog.clear()
    over = [o for o in TINY if not o.startswith(("data.", "encoder."))] + [
        "data=flickr8k", "encoder=resnet18", "encoder.image_size=64", "encoder.batch_size=8",
        "encoder.num_workers=0", "encoder.pretrained=false", "encoder.device=cpu", "encoder.precision=auto",
        f"data.json_path={moved / 'dataset.json'}", f"data.image_root={moved}", f"data.cache_dir={cache}",
        "data.min_word_freq=1", "data.batch_size=4", "trainer.max_epochs=1", "decode.beam_size=1"]
    results = train(shrink(compose_cfg(over, work / "run", work)))
    assert not _extracted(caplog)
    assert any(f"features: loaded from store {store.parent}" in r.getMessage() for r in caplog.records)
    assert _digest(store) == digest  # the same feature bytes
    assert results["feature_precision"] == dtype_name(extraction_dtype(torch.device("cpu")))

    # A caption changed: the features are the same images', so the same store.
    data = json.loads((moved / "dataset.json").read_text())
    data["images"][0]["sentences"] = [{"raw": "an entirely new caption"}]
    (moved / "dataset.json").write_text(json.dumps(data))
    caplog.clear()
    again = usable_data(_data_cfg(moved / "dataset.json", cache), ENC)
    assert not _extracted(caplog) and again.features.path == store

    # An image replaced by another of a different size: extracted anew, into another store.
    Image.fromarray(np.zeros((60, 60, 3), np.uint8)).save(moved / "images" / "3.png")
    caplog.clear()
    replaced = usable_data(_data_cfg(moved / "dataset.json", cache), ENC)
    assert _extracted(caplog) and replaced.features.path != store
    assert not np.array_equal(np.asarray(replaced.features[3]), np.asarray(first.features[3]))


def test_a_store_made_under_the_old_key_is_adopted_not_rebuilt(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="captioning")
    json_path, cache = _dataset(tmp_path / "data"), tmp_path / "cache"
    built = usable_data(_data_cfg(json_path, cache), ENC)
    digest = _digest(built.features.path)
    # What the previous key was: the dataset file's absolute path and mtime, the format, the
    # paths as given, the root, the batch size (data/prepare.py and data/features.py before).
    manifest = json.loads((built.features.path.parent / "manifest.json").read_text())
    spec = manifest["spec"]
    old = {"dataset": str(json_path.resolve()), "dataset_mtime": json_path.stat().st_mtime_ns,
           "format": "karpathy", "encoder": spec["encoder"], "weights": spec["weights"],
           "paths": fingerprint([str(json_path.parent / "images" / f"{i}.png") for i in range(12)]),
           "size": 64, "max_pixels": spec["max_pixels"], "root": str(json_path.parent),
           "precision": spec["precision"], "batch_size": ENC["batch_size"]}
    legacy = cache / f"store_{fingerprint(old, length=16)}"
    built.features.path.parent.rename(legacy)
    manifest["spec"] = old
    (legacy / "manifest.json").write_text(json.dumps(manifest))
    caplog.clear()
    adopted = usable_data(_data_cfg(json_path, cache), ENC)
    assert not _extracted(caplog)
    assert any("adopted store" in r.getMessage() for r in caplog.records)
    assert adopted.features.path == built.features.path and not legacy.exists()
    assert _digest(adopted.features.path) == digest


def test_a_store_of_the_other_precision_is_reused_unless_a_precision_is_forced(tmp_path, caplog):
    """Made where extraction runs in the other precision (a GPU's bf16 opened on an fp32 CPU,
    or the reverse): reused with one line under auto; a forced precision extracts its own."""
    caplog.set_level(logging.INFO, logger="captioning")
    json_path, cache = _dataset(tmp_path / "data"), tmp_path / "cache"
    mine = dtype_name(extraction_dtype(torch.device("cpu")))  # what auto picks on this CPU
    other = "fp32" if mine == "bfloat16" else "bf16"
    made = usable_data(_data_cfg(json_path, cache), {**ENC, "precision": other})
    assert _extracted(caplog) and made.features.precision != mine
    caplog.clear()
    reused = usable_data(_data_cfg(json_path, cache), ENC)
    assert not _extracted(caplog) and reused.features.path == made.features.path
    notes = [r.getMessage() for r in caplog.records if "features: reusing" in r.getMessage()]
    assert len(notes) == 1 and f"extracted in {made.features.precision}" in notes[0]
    caplog.clear()
    forced = "bf16" if mine == "bfloat16" else "fp32"
    own = usable_data(_data_cfg(json_path, cache), {**ENC, "precision": forced})
    assert _extracted(caplog) and own.features.path != made.features.path
    assert own.features.precision == mine


@pytest.mark.parametrize("faster", ["fp32", "bf16"])
def test_a_forced_precision_the_cpu_measured_slower_is_named_before_extraction(tmp_path, caplog,
                                                                               monkeypatch, faster):
    """encoder.precision=bf16 forced (the convergence grid's, one precision on every machine)
    on a CPU whose calibration found bf16 convolutions 5x slower: one warning with the
    measured times; none where bf16 is the faster one. The calibration is given, not measured."""
    from captioning.models import precision_choice as precision

    times = {"fp32": {"fp32_s": 0.010, "bf16_s": 0.050}, "bf16": {"fp32_s": 0.020, "bf16_s": 0.010}}[faster]
    entry = {"encoder": {**times, "choice": faster}, "decoder": {**times, "choice": faster}}
    monkeypatch.setattr(precision, "calibration", lambda: entry)
    caplog.set_level(logging.INFO, logger="captioning")
    usable_data(_data_cfg(_dataset(tmp_path / "data"), tmp_path / "cache"), {**ENC, "precision": "bf16"})
    assert _extracted(caplog)
    warned = [r.getMessage() for r in caplog.records if "is forced" in r.getMessage()]
    if faster == "fp32":
        assert len(warned) == 1 and "5.0x slower in it than in float32 (50.0 against 10.0 ms" in warned[0]
    else:
        assert warned == []


def test_precision_names_are_checked():
    with pytest.raises(ValueError, match="encoder.precision='half'; valid: auto, fp32, bf16"):
        extraction_dtype(torch.device("cpu"), "half")
    assert extraction_dtype(torch.device("cpu"), "fp32") == torch.float32
    assert extraction_dtype(torch.device("cpu"), "bf16") == torch.bfloat16


def test_each_store_has_its_own_lock_so_other_stores_build_meanwhile(tmp_path):
    """Runs on one dataset with another encoder or image size (a grid's cells in parallel) extract their
    stores at the same time; runs that would build the same store (either precision: the auto
    rule reads both) take one lock, and the second waits for the first."""
    import threading

    from captioning.data.prepare import dataset_features, locate_dataset, preparing

    cache = tmp_path / "cache"
    cfg = _data_cfg(_dataset(tmp_path / "here"), cache)

    def name(enc: dict, data_cfg: dict = cfg) -> str:
        return locate_dataset(data_cfg, enc).lock_name()

    this = name(ENC)
    assert name({**ENC, "precision": "bf16"}) == name({**ENC, "precision": "fp32"}) == this
    assert name({**ENC, "image_size": 32}) != this
    assert name({**ENC, "name": "resnet34"}) != this
    moved = shutil.copytree(tmp_path / "here", tmp_path / "moved")
    assert name(ENC, _data_cfg(moved / "dataset.json", cache)) == this  # the same store

    loaded: dict[str, object] = {}

    def load(key: str, enc: dict) -> None:
        loaded[key] = dataset_features(cfg, enc)

    with preparing(cache, this):  # another process is building this store
        other = threading.Thread(target=load, args=("other size", {**ENC, "image_size": 32}))
        other.start()
        other.join(timeout=300)
        assert "other size" in loaded  # extracted its own store meanwhile
        same = threading.Thread(target=load, args=("same", ENC))
        same.start()
        same.join(timeout=3)
        assert same.is_alive() and "same" not in loaded  # waits for this store's lock
    same.join(timeout=300)
    assert "same" in loaded


def test_prepare_data_waits_for_a_store_another_process_is_building(tmp_path):
    """scripts/prepare_data.py beside a training run (or a grid's cell) that is extracting the
    same store takes the same lock and waits, instead of writing the store too: before the fix
    both extracted the same rows at half speed each."""
    import threading

    from captioning.data.dataset_report import data_report
    from captioning.data.prepare import locate_dataset, preparing

    cache = tmp_path / "cache"
    cfg = _data_cfg(_dataset(tmp_path / "here"), cache)
    reports: list[dict] = []
    with preparing(cache, locate_dataset(cfg, ENC).lock_name()):  # a run is building it
        report = threading.Thread(target=lambda: reports.append(data_report(cfg, ENC)))
        report.start()
        report.join(timeout=3)
        assert report.is_alive() and not reports
        assert not list(cache.glob("store_*"))  # not even created: it waits before opening it
    report.join(timeout=300)
    assert reports and reports[0]["store"]["rows"] == reports[0]["images"]
    assert Path(reports[0]["store"]["path"]).is_file()
