"""Karpathy reader + feature cache + datasets/collate on a hand-made dataset with a corrupt image."""

import json
import logging

import numpy as np
import pytest
import torch
from PIL import Image

from captioning.data.datasets import Collate, EvalImages, ImageCaptions
from captioning.data.karpathy import load_karpathy
from captioning.data.prepare import prepare_data
from captioning.schema import Karpathy, ResNet, completed

ENC = {"name": "resnet18", "image_size": 64, "batch_size": 4, "num_workers": 0,
       "normalize": "standard", "pca_dim": None, "whiten_eps": 0.1}
ENC = completed(ENC, ResNet)  # every other encoder setting at its default


@pytest.fixture
def dataset(tmp_path):
    (tmp_path / "imgs").mkdir()
    images = []
    for i, split in enumerate(["train", "train", "restval", "val", "test", "train"]):
        name = f"{i}.jpg"
        if i == 5:
            (tmp_path / "imgs" / name).write_bytes(b"not a jpeg at all")
        else:
            arr = np.random.default_rng(i).integers(0, 255, (40, 50, 3), dtype=np.uint8)
            Image.fromarray(arr).save(tmp_path / "imgs" / name)
        sentences = [{"raw": f"A Dog runs, number {i}!"}, {"tokens": ["a", "dog"]}]
        images.append({"filename": name, "filepath": "imgs", "split": split, "imgid": i,
                       "cocoid": 100 + i, "sentences": sentences[: 1 + i % 2]})
    path = tmp_path / "dataset_x.json"
    path.write_text(json.dumps({"images": images}))
    return path


def test_reader_tokenizes_maps_restval_and_ids(dataset):
    recs = load_karpathy(dataset)
    assert [r.split for r in recs] == ["train", "train", "train", "val", "test", "train"]
    assert recs[0].captions == [["a", "dog", "runs", ",", "number", "0", "!"]]
    assert recs[1].captions[1] == ["a", "dog"] and recs[0].image_id == 100  # cocoid first


def test_corrupt_image_is_skipped_counted_and_reported(dataset, tmp_path, caplog):
    cfg = completed({"name": "x", "json_path": str(dataset), "cache_dir": str(tmp_path / "cache"),
                     "min_word_freq": 1}, Karpathy)
    with caplog.at_level(logging.WARNING):
        data = prepare_data(cfg, ENC)
    assert [path for path, _ in data.skipped] == [str(tmp_path / "imgs" / "5.jpg")]
    assert data.skipped[0][1].startswith("not a readable image")
    assert "skipped 1 image" in caplog.text and "5.jpg: not a readable image" in caplog.text
    assert len(data.records) == 5  # 64px -> 2x2 grid; the corrupt image's row is never read
    assert data.raw_features(range(5)).shape == (5, 4, 512) and 5 not in data.rows.tolist()
    # The cache is reused: a second prepare reads the same features.
    again = prepare_data(cfg, ENC)
    assert torch.equal(again.raw_features(range(5)), data.raw_features(range(5)))
    assert len(list((tmp_path / "cache").glob("store_*/features.npy"))) == 1


def test_collate_pads_and_points_captions_at_images(dataset, tmp_path):
    cfg = completed({"name": "x", "json_path": str(dataset), "cache_dir": str(tmp_path / "cache"),
                     "min_word_freq": 1}, Karpathy)
    data = prepare_data(cfg, ENC)
    train = ImageCaptions(data, "train")
    batch = Collate(data, data.vocab.pad)([train[0], train[1]])
    assert batch["features"].shape == (2, 4, 512) and batch["features"].dtype == torch.float16  # raw
    assert batch["image_index"].tolist() == [0, 1, 1]  # image 0 has 1 caption, image 1 two
    toks = batch["tokens"]
    assert toks.shape == (3, 9) and (toks[2, 4:] == data.vocab.pad).all()
    assert (toks[:, 0] == data.vocab.bos).all()
    ev = Collate(data, data.vocab.pad)([EvalImages(data, "test")[0]])
    assert ev["image_id"] == [104] and "tokens" not in ev
