"""No tuning on the test split, no leaks: a sweep's objective is the validation score, and a
dataset whose val or test split shares images with train is refused before any extraction."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra.experimental.callback import Callback
from PIL import Image

from captioning.errors import UserError
from captioning.schema import ResNet, completed

ROOT = Path(__file__).resolve().parents[1]


class ReturnValues(Callback):
    """A Hydra callback (hydra.callbacks.<name>._target_): each job's return value, appended
    as a JSON line to $RETURN_LOG."""

    def on_job_end(self, config, job_return, **kwargs) -> None:
        with open(os.environ["RETURN_LOG"], "a") as f:
            row = {"dir": str(config.paths.output_dir), "value": job_return.return_value}
            f.write(json.dumps(row) + "\n")


def test_a_multirun_returns_the_validation_score(tmp_path, data_dir):
    """train.py -m: each job returns its best val/bleu4 (the checkpoint's selection score),
    not a test score: the objective a sweeper (Optuna, Nevergrad) optimises."""
    log = tmp_path / "returns.jsonl"
    tiny = ["encoder=resnet18", "encoder.image_size=64", "encoder.num_workers=0",
            "data.synthetic.num_train=96", "data.synthetic.num_val=12", "data.synthetic.num_test=24",
            "data.synthetic.image_size=64", "data.batch_size=4", "decoder.embed_dim=64",
            "decoder.hidden_dim=64", "decoder.value_dim=32", "attention.attn_dim=32"]
    env = {**os.environ, "WANDB_MODE": "offline", "RETURN_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", "seed=0,1", "trainer.max_epochs=2",
         "trainer.limit_train_batches=4", "trainer.limit_test_batches=1", "decode.beam_size=1",
         "logger=none", "trainer.enable_progress_bar=false", f"paths.data_dir={data_dir}",
         f"paths.log_dir={tmp_path / 'logs'}",
         "+hydra.callbacks.returns._target_=test_no_test_tuning.ReturnValues",
         *tiny], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(jobs) == 2
    for job in jobs:
        results = json.loads((Path(job["dir"]) / "results.json").read_text())
        assert results["monitor"] == "val/bleu4"
        assert job["value"] == results["best_score"]
        assert job["value"] != results["test/bleu4"] or results["test/bleu4"] == results["best_score"]


def _dataset(root: Path, splits: list[str]) -> Path:
    """A Karpathy JSON whose entries have `splits` (one image may be listed twice)."""
    (root / "images").mkdir(parents=True)
    images = []
    for i, split in enumerate(splits):
        name = f"{i % 6}.png"  # entries 6.. list images 0.. again
        if not (root / "images" / name).exists():
            Image.fromarray(np.full((40, 40, 3), i * 20, np.uint8)).save(root / "images" / name)
        images.append({"filename": name, "filepath": "images", "split": split, "imgid": i,
                       "sentences": [{"raw": f"picture {i}"}]})
    (root / "dataset.json").write_text(json.dumps({"images": images}))
    return root / "dataset.json"


def _data_cfg(json_path: Path, tmp_path: Path) -> dict:
    return {"name": "mine", "format": "karpathy", "json_path": str(json_path),
            "image_root": str(json_path.parent), "cache_dir": str(tmp_path / "cache")}


ENC = {"name": "resnet18", "image_size": 64, "batch_size": 8, "num_workers": 0, "device": "cpu",
       "pretrained": False, "normalize": "standard", "pca_dim": None, "whiten_eps": 0.1}
ENC = completed(ENC, ResNet)  # every other encoder setting at its default


def test_training_images_in_test_are_refused_before_extraction(tmp_path, monkeypatch):
    from captioning.data import features
    from captioning.data.prepare import prepare_data

    extracted = []
    monkeypatch.setattr(features, "_extract_into", lambda *a, **k: extracted.append(1))
    # entries 6 and 7 list images 0 and 1 (training images) again, as test images
    json_path = _dataset(tmp_path / "d", ["train"] * 4 + ["val", "test", "test", "test"])
    with pytest.raises(UserError) as err:
        prepare_data(_data_cfg(json_path, tmp_path), ENC)
    message = str(err.value)
    assert "training and into test (2 image(s), e.g." in message and "0.png" in message
    assert "Give every image one split" in message
    assert extracted == []


def test_a_split_file_that_puts_training_images_into_test_is_refused(tmp_path):
    """data.format=coco with a Karpathy split file listing one image under two splits."""
    from captioning.data.prepare import prepare_data

    root = tmp_path / "coco"
    (root / "images").mkdir(parents=True)
    coco = {"images": [], "annotations": []}
    split_entries = []
    for i in range(6):
        name = f"COCO_{i}.jpg"
        Image.fromarray(np.full((40, 40, 3), i * 30, np.uint8)).save(root / "images" / name)
        coco["images"].append({"id": i, "file_name": name})
        coco["annotations"].append({"id": i, "image_id": i, "caption": f"thing {i}"})
        split_entries.append({"filename": name, "cocoid": i, "split": "train" if i < 4 else "val",
                              "sentences": []})
    split_entries.append({**split_entries[2], "split": "test"})  # a training image, also in test
    (root / "captions.json").write_text(json.dumps(coco))
    (root / "split.json").write_text(json.dumps({"images": split_entries}))
    cfg = {**_data_cfg(root / "captions.json", tmp_path), "format": "coco",
           "split_file": str(root / "split.json"), "image_root": str(root / "images")}
    with pytest.raises(UserError, match=r"training and into test \(1 image\(s\), e.g. .*COCO_2.jpg"):
        prepare_data(cfg, ENC)


def test_no_example_overlaps():
    """The documented COCO commands evaluate on the Karpathy test split of the file they train
    on, never on a split that holds training (restval) images."""
    pages = (ROOT / "README.md", ROOT / "data" / "README.md", *(ROOT / "docs").glob("*.md"))
    commands = [line for doc in pages
                for line in doc.read_text().splitlines() if line.strip().startswith("python ")]
    assert any("evaluate.py" in c for c in commands)
    # one split for a whole COCO file, in an evaluation: the file's restval images are training images
    assert not [c for c in commands if "data.split=" in c and "evaluate.py" in c]
    # and every training command that sets a split file reads it from the Karpathy JSON
    assert all("dataset_coco.json" in c for c in commands if "data.split_file=" in c and "train.py" in c)
