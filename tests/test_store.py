"""The feature store: kill -9 during extraction resumes at a batch boundary and ends bitwise
equal to an uninterrupted build; a damaged or mismatching store is rebuilt; readers pickle
as a path (DataLoader workers open their own map)."""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from captioning.data.features import stored_features
from captioning.models import build_encoder
from captioning.schema import ResNet, completed

ENC = {"name": "resnet18", "image_size": 64, "batch_size": 4, "num_workers": 0, "device": "cpu"}
ENC = completed(ENC, ResNet)  # every other encoder setting at its default
KEY = {"dataset": "test", "encoder": "resnet18", "weights": "random-seed0"}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("store_images")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(60):
        p = d / f"{i}.png"
        Image.fromarray(rng.integers(0, 255, (40, 50, 3), np.uint8)).save(p)
        paths.append(p)
    (d / "broken.png").write_bytes(b"not a png")
    return [*paths[:30], d / "broken.png", *paths[30:]]


def _build(cache: Path, paths: list[Path]):
    return stored_features(cache, KEY, paths, lambda: build_encoder(ENC), ENC)


def test_kill_9_during_extraction_resumes_and_ends_bitwise_equal(images, tmp_path, caplog):
    cache = tmp_path / "killed"
    # A child process extracts (slowed down after each batch so the kill lands mid-build).
    script = f"""
import sys, time
from pathlib import Path
from captioning.data import store as store_mod
from captioning.data.features import stored_features
from captioning.models import build_encoder
write = store_mod.FeatureStore.write
def slow_write(self, *a, **k):
    write(self, *a, **k)
    time.sleep(0.1)
store_mod.FeatureStore.write = slow_write
paths = [Path(p) for p in {[str(p) for p in images]!r}]
stored_features(Path({str(cache)!r}), {KEY!r}, paths, lambda: build_encoder({ENC!r}), {ENC!r})
"""
    child = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 120
    done = 0
    while time.time() < deadline and child.poll() is None:
        manifests = list(cache.glob("store_*/manifest.json"))
        if manifests:
            try:
                done = json.loads(manifests[0].read_text())["rows_done"]
            except (OSError, ValueError):  # mid-rename: read again
                done = 0
            if done >= 8:
                os.kill(child.pid, signal.SIGKILL)
                break
        time.sleep(0.01)
    child.wait()
    assert child.returncode == -signal.SIGKILL and 8 <= done < len(images), (child.returncode, done)

    with caplog.at_level(logging.INFO):
        resumed, reasons = _build(cache, images)
    line = next(r.message for r in caplog.records if "resuming" in r.message)
    already = int(re.search(r"(\d+) of \d+ rows already done", line).group(1))
    assert already >= done and already % ENC["batch_size"] == 0 and already < len(images)

    fresh, fresh_reasons = _build(tmp_path / "fresh", images)
    assert np.array_equal(np.asarray(resumed[:]), np.asarray(fresh[:]))  # bitwise
    assert reasons == fresh_reasons and reasons[30].startswith("not a readable image")
    assert sum(bool(r) for r in reasons) == 1


def test_a_damaged_or_mismatching_store_is_rebuilt_never_used(images, tmp_path, caplog):
    cache = tmp_path / "cache"
    feats, _ = _build(cache, images[:8])
    reference = np.asarray(feats[:]).copy()
    (store,) = cache.glob("store_*")
    data = (store / "features.npy").read_bytes()
    (store / "features.npy").write_bytes(data[: len(data) // 2])  # truncated
    with caplog.at_level(logging.WARNING):
        again, _ = _build(cache, images[:8])
    assert "does not match" in caplog.text and "rebuilding" in caplog.text
    assert np.array_equal(np.asarray(again[:]), reference)
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["shape"][2] = 7  # a manifest that describes other rows
    (store / "manifest.json").write_text(json.dumps(manifest))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _build(cache, images[:8])
    assert "shape differs" in caplog.text


def test_readers_pickle_as_a_path_and_open_their_own_map(images, tmp_path):
    feats, _ = _build(tmp_path / "cache", images[:8])
    first = np.asarray(feats[0]).copy()  # opens the map in this process
    blob = pickle.dumps(feats)
    assert len(blob) < 1000  # the path, not 8 x 4 x 512 float16 values nor a file handle
    clone = pickle.loads(blob)
    assert clone._array is None and np.array_equal(np.asarray(clone[0]), first)
