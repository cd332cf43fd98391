"""The same images and captions as Karpathy JSON, COCO annotations (+ a split file), CSV and
JSONL give the same records."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from PIL import Image

from captioning.data.formats import load_records

CAPTIONS = [["A man in a T-shirt, smiling.", "Ein Mann im Café!"], ["A dog, on a lawn", "..."],
            ["Two cats; one \"black\"", "cats"], ["A red bus.", "a bus"]]
SPLITS = ["train", "restval", "val", "test"]


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "images").mkdir()
    for i in range(4):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(tmp_path / "images" / f"{i}.jpg")
    karpathy = {"images": [{"filepath": "images", "filename": f"{i}.jpg", "cocoid": 100 + i,
                            "split": SPLITS[i], "sentences": [{"raw": c} for c in CAPTIONS[i]]}
                           for i in range(4)]}
    (tmp_path / "karpathy.json").write_text(json.dumps(karpathy))
    coco = {"images": [{"id": 100 + i, "file_name": f"images/{i}.jpg"} for i in range(4)],
            "annotations": [{"image_id": 100 + i, "id": 10 * i + k, "caption": c}
                            for i in range(4) for k, c in enumerate(CAPTIONS[i])]}
    (tmp_path / "coco.json").write_text(json.dumps(coco))
    split = lambda i: "train" if SPLITS[i] == "restval" else SPLITS[i]  # noqa: E731
    with open(tmp_path / "captions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["image", "caption", "split"])
        writer.writerows([f"images/{i}.jpg", c, split(i)] for i in range(4) for c in CAPTIONS[i])
    (tmp_path / "captions.jsonl").write_text("\n".join(
        json.dumps({"image": f"images/{i}.jpg", "caption": c, "split": split(i)})
        for i in range(4) for c in CAPTIONS[i]) + "\n")
    return tmp_path


def _view(records):
    return [(str(r.path), r.split, r.captions, r.texts, r.empty_captions) for r in records]


def test_every_format_gives_the_same_records(folder):
    karpathy = load_records(folder / "karpathy.json", None)
    assert [r.split for r in karpathy] == ["train", "train", "val", "test"]
    assert karpathy[1].empty_captions == 1 and karpathy[0].captions[1] == ["ein", "mann", "im", "café", "!"]
    coco = load_records(folder / "coco.json", folder, "coco", split_file=str(folder / "karpathy.json"))
    assert [r.image_id for r in coco] == [r.image_id for r in karpathy]  # COCO ids
    for fmt, name in (("csv", "captions.csv"), ("jsonl", "captions.jsonl")):
        assert _view(load_records(folder / name, folder, fmt)) == _view(karpathy), fmt
    assert _view(coco) == _view(karpathy)
    one = load_records(folder / "coco.json", folder, "coco", split="val")
    assert {r.split for r in one} == {"val"}


def test_format_errors_name_the_fix(folder):
    with pytest.raises(ValueError, match="unknown data.format 'xml'; valid: karpathy, coco, csv, jsonl"):
        load_records(folder / "coco.json", folder, "xml")
    with pytest.raises(ValueError, match="exactly one of data.split_file"):
        load_records(folder / "coco.json", folder, "coco")
    (folder / "nosplit.csv").write_text("image,caption\nimages/0.jpg,a man\n")
    with pytest.raises(ValueError, match="row 1 has split None; give a split column"):
        load_records(folder / "nosplit.csv", folder, "csv")
    (folder / "bad.csv").write_text("file,text\nimages/0.jpg,a man\n")
    with pytest.raises(ValueError, match="header must name the columns image,caption"):
        load_records(folder / "bad.csv", folder, "csv")
    (folder / "bad.jsonl").write_text('{"image": "images/0.jpg", "caption": "a", "split": "train"}\n{oops\n')
    with pytest.raises(ValueError, match="bad.jsonl:2 is not a JSON object"):
        load_records(folder / "bad.jsonl", folder, "jsonl")
