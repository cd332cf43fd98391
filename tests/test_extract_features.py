"""Extract once, train many times (scripts/extract_features.py): the files it writes hold the
store's features bit for bit in every layout, and training on them with encoder=precomputed
gives the test captions training on the encoder gives."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY, compose_cfg, shrink
from omegaconf import OmegaConf

from captioning.data.export import export_features
from captioning.data.feature_source import FORMATS
from captioning.data.prepare import dataset_features
from captioning.errors import UserError

# The encoder run: one short epoch, the same for both runs; what differs is where features come from.
# three epochs: after one, a tiny run may caption every image alike (some CPUs, some seeds),
# and then equal captions would not show that the two runs read the same features
RUN = TINY + ["trainer.max_epochs=3", "decode.beam_size=2"]


def _plain(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory, data_dir):
    cfg = _plain(compose_cfg(RUN, tmp_path_factory.mktemp("store"), data_dir))
    located, feats, reasons = dataset_features(cfg["data"], cfg["encoder"])
    rows = {str(r.image_id): np.asarray(feats[i]) for i, r in enumerate(located.records) if not reasons[i]}
    return cfg, rows


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_layout_holds_the_stores_features_bit_for_bit(store, tmp_path, fmt):
    cfg, rows = store
    out = tmp_path / ("features.npz" if fmt == "npz" else "features")
    done = export_features(cfg["data"], cfg["encoder"], {"out": str(out), "format": fmt, "splits": []})
    assert done["images"] == len(rows) and done["dtype"] == "float16"
    if fmt == "npz":
        with np.load(out) as z:
            got = dict(zip(z["ids"].tolist(), z["features"]))
    else:
        got = {p.stem: (np.load(p) if fmt == "npy_dir" else np.load(p)["features"])
               for p in out.glob(f"*.{fmt[:3]}")}
    assert set(got) == set(rows)
    for image_id, want in rows.items():
        assert got[image_id].dtype == want.dtype and np.array_equal(got[image_id], want), image_id


def test_chosen_splits_only_and_a_wrong_split_named(store, tmp_path):
    cfg, _ = store
    done = export_features(cfg["data"], cfg["encoder"], {"out": str(tmp_path / "t"), "format": "npy_dir",
                                                         "splits": ["test"]})
    assert done["images"] == cfg["data"]["synthetic"]["num_test"]
    with pytest.raises(UserError, match="extract.out is not set"):  # before any extraction
        export_features(cfg["data"], cfg["encoder"], {"out": "???", "format": "npy_dir", "splits": []})
    with pytest.raises(UserError, match=r"extract.splits: \['tset'\] not in the dataset"):
        export_features(cfg["data"], cfg["encoder"], {"out": str(tmp_path / "u"), "format": "npy_dir",
                                                      "splits": ["tset"]})


@pytest.mark.parametrize("encoder", ["resnet18", "vit_b_16"])
def test_training_on_the_extracted_files_captions_as_training_on_the_encoder(tmp_path, data_dir, encoder):
    """With the command the export records (ViT: its class token is row 0, and the run is told
    encoder.global_first=true, so the decoder starts from it as it does on the encoder)."""
    from captioning.lit.training import train

    run = RUN + [f"encoder={encoder}", "encoder.image_size=32"] if encoder != "resnet18" else RUN
    cfg = _plain(compose_cfg(run, tmp_path, data_dir))
    out = tmp_path / "features"
    done = export_features(cfg["data"], cfg["encoder"], {"out": str(out), "format": "npy_dir", "splits": []})
    assert done["global_first"] == (encoder == "vit_b_16") and done["cells"] == 4 + done["global_first"]
    direct = shrink(compose_cfg(run, tmp_path / "direct", data_dir))
    train(direct)
    _, path, *told = done["train_with"].split()
    assert path == f"encoder.path={out}"
    extracted = [o for o in RUN if not o.startswith("encoder")] + ["encoder=precomputed", path, *told]
    train(shrink(compose_cfg(extracted, tmp_path / "extracted", data_dir)))
    captions = [json.loads((tmp_path / run / "predictions.json").read_text())
                for run in ("direct", "extracted")]
    assert captions[0] == captions[1]
    assert len({json.dumps(c["caption"]) for c in captions[0]}) > 1  # not one caption for every image
