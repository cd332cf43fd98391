"""scripts/prepare_data.py: a dataset checked and its store built before training; the report
counts what the folder holds and the store it builds is the one training then reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def test_report_counts_the_folder_and_builds_the_store(tmp_path):
    (tmp_path / "images").mkdir()
    for i in range(6):
        Image.fromarray(np.full((20, 20, 3), 30 * i, np.uint8)).save(tmp_path / "images" / f"{i}.jpg")
    (tmp_path / "images" / "bad.jpg").write_text("not an image")
    names = ["0.jpg", "1.jpg", "2.jpg", "3.jpg", "4.jpg", "5.jpg", "bad.jpg", "gone.jpg", "0.jpg"]
    splits = ["train", "train", "train", "val", "test", "train", "train", "train", "val"]
    captions = ["A dog runs.", "A red car, parked!", "Two dogs play in the park", "...", "a cat"]
    images = [{"filepath": "images", "filename": n, "split": s, "imgid": k,
               "sentences": [{"raw": captions[k % 5]}, {"raw": "a small thing"}]}
              for k, (n, s) in enumerate(zip(names, splits))]
    (tmp_path / "d.json").write_text(json.dumps({"images": images}))
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "scripts/prepare_data.py", "data=flickr8k", "encoder=resnet18",
         "encoder.image_size=64", "encoder.pretrained=false", "encoder.num_workers=0",
         f"data.json_path={tmp_path / 'd.json'}", f"data.image_root={tmp_path}",
         f"data.cache_dir={tmp_path / 'cache'}", "data.min_word_freq=1", f"report={report_path}"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    report = json.loads(report_path.read_text())
    assert report["images"] == 9 and report["images_per_split"] == {"train": 6, "val": 2, "test": 1}
    # 0.jpg twice, in train and in val: a duplicate, and in several splits (training refuses it)
    assert report["files"] == {"missing": 1, "outside_root": 0, "duplicates": 1, "in_several_splits": 1}
    assert report["captions_dropped_no_word"] == 2  # "..." twice (images 3 and 8)
    assert report["skipped"] == {"not a readable image": 1, "missing file": 1}
    assert report["usable_images"] == 7
    assert report["store"]["grid"] == "2x2" and report["store"]["rows"] == 9
    assert Path(report["store"]["path"]).is_file()
    assert "usable: 7" in proc.stdout and "store: 9 rows x 2x2 grid" in proc.stdout
    # The store it built is the one training reads: nothing is extracted again.
    from conftest import TINY, compose_cfg
    from omegaconf import OmegaConf

    from captioning.data.prepare import dataset_store

    over = [o for o in TINY if not o.startswith(("data.", "encoder."))] + [
        "data=flickr8k", "encoder=resnet18", "encoder.image_size=64", "encoder.pretrained=false",
        "encoder.num_workers=0", f"data.json_path={tmp_path / 'd.json'}",
        f"data.image_root={tmp_path}", f"data.cache_dir={tmp_path / 'cache'}", "data.min_word_freq=1"]
    cfg = OmegaConf.to_container(compose_cfg(over, tmp_path / "run", tmp_path), resolve=True)
    assert dataset_store(cfg["data"], cfg["encoder"]).complete


def test_config_hash_ignores_where_and_fingerprints_what(tmp_path):
    """Run dirs, data locations and display keys leave the hash alone; a file named by a
    content-hashed key enters by its bytes: moved, same hash; edited, another."""
    from captioning.provenance import config_hash

    a = tmp_path / "a" / "d.json"
    a.parent.mkdir()
    a.write_text('{"images": []}')
    cfg = {"seed": 0, "paths": {"output_dir": "run1"}, "data": {"json_path": str(a), "cache_dir": "x",
           "image_root": "i", "batch_size": 4}, "trainer": {"default_root_dir": "run1",
           "enable_progress_bar": True, "max_epochs": 2}}
    h = config_hash(cfg)
    b = tmp_path / "b.json"
    b.write_text(a.read_text())
    moved = {**cfg, "paths": {"output_dir": "run2"},
             "data": {**cfg["data"], "json_path": str(b), "cache_dir": "y", "image_root": "j"},
             "trainer": {**cfg["trainer"], "default_root_dir": "run2", "enable_progress_bar": False}}
    assert config_hash(moved) == h
    b.write_text('{"images": [1]}')
    assert config_hash(moved) != h
    assert config_hash({**cfg, "trainer": {**cfg["trainer"], "max_epochs": 3}}) != h
