"""encoder=precomputed: features someone already has, in every supported file layout, through
training, evaluation and captioning; ragged regions whose padding gets exactly zero weight in
every mode; every bad case refused or skipped by name before training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, TINY_DECODERS, compose_cfg, config_options
from omegaconf import OmegaConf

from captioning.data.feature_source import FORMATS, Source
from captioning.data.precomputed import precomputed_features, scan
from captioning.data.prepare import load_dataset_records
from captioning.errors import UserError
from captioning.models.captioner import build_captioner
from captioning.schema import Precomputed, completed

WIDTH = 48
BASE = [o for o in TINY if not o.startswith("encoder")]  # no ResNet settings: no ResNet


def _boxes(rng, n: int) -> np.ndarray:
    corners = np.sort(rng.random((n, 2, 2), dtype=np.float32), axis=1)  # per axis: low, high
    return corners.transpose(0, 2, 1).reshape(n, 4)[:, [0, 2, 1, 3]]  # x1 y1 x2 y2


def write_features(ids: list, where: Path, fmt: str, seed: int = 0, width: int = WIDTH,
                   regions=(3, 9)) -> dict:
    """Generated ragged region features (and boxes) for `ids` in layout `fmt`; -> the
    encoder overrides that read them."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(*regions, size=len(ids))
    feats = [rng.standard_normal((n, width)).astype(np.float16) for n in counts]
    boxes = [_boxes(rng, n) for n in counts]
    if fmt == "npz":
        where.parent.mkdir(parents=True, exist_ok=True)
        np.savez(where, ids=np.asarray(ids), features=np.concatenate(feats),
                 counts=counts, boxes=np.concatenate(boxes))
        return {"path": str(where)}
    where.mkdir(parents=True, exist_ok=True)
    if fmt == "npz_dir":
        for i, f, b in zip(ids, feats, boxes):
            np.savez(where / f"{i}.npz", feat=f, boxes=b)
        return {"path": str(where), "features_key": "feat"}
    (where.parent / "boxes").mkdir(exist_ok=True)
    for i, f, b in zip(ids, feats, boxes):
        np.save(where / f"{i}.npy", f)
        np.save(where.parent / "boxes" / f"{i}.npy", b)
    return {"path": str(where), "boxes_path": str(where.parent / "boxes")}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    cfg = compose_cfg(BASE, data / "out", data)
    return load_dataset_records(OmegaConf.to_container(cfg.data, resolve=True))[0], data


def _enc(over: dict) -> dict:
    return completed({"name": "precomputed", **over}, Precomputed)  # the rest at their defaults


def _overrides(enc: dict) -> list[str]:
    return ["encoder=precomputed"] + [f"encoder.{k}={v}" for k, v in enc.items()]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_layout_trains_evaluates_and_captions(records, tmp_path, fmt):
    """Train (debug=fast) from generated features, then evaluate.py's decode and caption.py's
    captioning from the checkpoint: every caption comes from features, never an image."""
    from captioning.caption_files import caption_images
    from captioning.evaluation import decode_split
    from captioning.lit.training import train

    recs, data = records
    ids = [r.image_id for r in recs]
    enc = write_features(ids, tmp_path / ("feats.npz" if fmt == "npz" else "feats"), fmt)
    cfg = compose_cfg(BASE + ["debug=fast", "trainer.max_epochs=1", "decode.beam_size=2"] + _overrides(enc),
                      tmp_path / "run", data)
    results = train(cfg)
    predicted = json.loads((tmp_path / "run" / "predictions.json").read_text())
    assert results["test/bleu4"] >= 0 and len(predicted) == sum(r.split == "test" for r in recs)
    saved = torch.load(tmp_path / "run" / "checkpoints" / "best.ckpt", weights_only=True)
    assert saved["hyper_parameters"]["cfg"]["encoder"]["dim"] == WIDTH  # read from the files
    _, split, captions, _ = decode_split(tmp_path / "run" / "checkpoints" / "best.ckpt", "test")
    assert len(captions) == len(split) and all(c.words for c in captions)
    # caption.py from a feature file (the same layout a folder holds)
    single = tmp_path / "one"
    write_features([ids[0]], single, "npz_dir" if fmt == "npz_dir" else "npy_dir")
    target = next(single.glob("*.np*"))
    out, skipped = caption_images(tmp_path / "run" / "checkpoints" / "best.ckpt", target)
    assert not skipped and out[0]["caption"] and out[0]["image"] == str(target)


ACCEPTING = [m for m in config_options("attention") if m not in ("local", "hierarchical")]  # grid-only


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
@pytest.mark.parametrize("name", ACCEPTING)
def test_padding_gets_exactly_zero_weight_and_changes_nothing(name, decoder):
    """A batch of 3 images with 7, 4 and 1 real regions: padded regions get weight exactly 0
    in teacher forcing, greedy and beam decoding, and each image's captions and weights are
    those it gets alone, unpadded."""
    cfg = compose_cfg(BASE + [f"attention={name}", f"decoder={decoder}"] +
                      [f"decoder.{k}={v}" for k, v in TINY_DECODERS[decoder].items()] +
                      (["attention.adjacency=knn"] if name == "graph" else []), Path("/tmp/x"),
                      Path("/tmp/x"))
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain["encoder"] = {**_enc({"path": "/nonexistent"}), "pca_dim": None, "normalize": "standard",
                        "whiten_eps": 0.1, "dim": WIDTH}
    torch.manual_seed(0)
    model = build_captioner(plain, vocab_size=12).eval()
    raw = torch.randn(3, 7, WIDTH)
    counts = torch.tensor([7, 4, 1])
    mask = torch.arange(7) < counts[:, None]  # (3, 7)
    raw = raw.masked_fill(~mask[..., None], 123.0)  # padding's content must not matter either
    boxes = torch.tensor(_boxes(np.random.default_rng(0), 21)).view(3, 7, 4)
    tokens = torch.randint(3, 12, (3, 5))
    with torch.no_grad():
        logits, weights = model(raw, tokens, mask=mask, boxes=boxes)  # (3, 5, 12), (3, 5, 7)
        assert (weights.masked_select(~mask[:, None, :].expand_as(weights)) == 0).all()
        for beam in (1, 3):
            ids, w = model.generate(raw, 1, 2, 0, beam_size=beam, max_len=6, mask=mask, boxes=boxes)
            for k in range(3):
                assert (w[k][:, counts[k]:] == 0).all()
                alone_ids, alone_w = model.generate(raw[k : k + 1, : counts[k]], 1, 2, 0, beam_size=beam,
                                                    max_len=6, boxes=boxes[k : k + 1, : counts[k]])
                assert ids[k] == alone_ids[0]
                torch.testing.assert_close(w[k][:, : counts[k]], alone_w[0], atol=1e-5, rtol=1e-4)
        for k in range(3):
            alone, _ = model(raw[k : k + 1, : counts[k]], tokens[k : k + 1],
                             boxes=boxes[k : k + 1, : counts[k]])
            torch.testing.assert_close(logits[k : k + 1], alone, atol=1e-4, rtol=1e-4)


def test_bad_sources_are_named_counted_skipped_or_refused(records, tmp_path, caplog):
    recs, _ = records
    ids = [r.image_id for r in recs]
    folder = tmp_path / "feats"
    enc = _enc(write_features(ids, folder, "npy_dir"))
    # ids without features: skipped, each named; features without ids: counted
    (folder / f"{ids[0]}.npy").unlink()
    np.save(folder / "not_an_image.npy", np.zeros((3, WIDTH), np.float16))
    # NaN in one image: that row skipped by name when copied (before training)
    bad = np.load(folder / f"{ids[1]}.npy")
    bad[0, 0] = np.nan
    np.save(folder / f"{ids[1]}.npy", bad)
    found = scan(Source(enc), recs)
    assert found.reasons[0] == f"no features for image id {ids[0]} in {folder}"
    assert found.unused == 1 and sum(bool(w) for w in found.reasons) == 1
    feats, reasons = precomputed_features(recs, enc, tmp_path / "cache")
    assert reasons[0].startswith("no features for image id") and f"{ids[1]}.npy" in reasons[1]
    assert "NaN" in reasons[1] and sum(bool(w) for w in reasons) == 2
    assert feats.counts[0] == feats.counts[1] == 0 and feats.counts[2] > 0
    # a wrong width: refused, naming the file and both widths
    np.save(folder / f"{ids[2]}.npy", np.zeros((4, WIDTH + 1), np.float16))
    with pytest.raises(UserError, match=rf"{WIDTH + 1}.*{ids[2]}\.npy"):
        scan(Source(enc), recs)


def test_unusable_files_and_settings_are_refused_with_the_fix(records, tmp_path):
    recs, _ = records
    ids = [r.image_id for r in recs]
    with pytest.raises(UserError, match="encoder.path"):
        Source(_enc({"path": "???"}))
    with pytest.raises(UserError, match="no such file"):
        Source(_enc({"path": str(tmp_path / "missing")}))
    squeezed = tmp_path / "squeezed.npz"
    np.savez_compressed(squeezed, ids=np.asarray(ids), features=np.zeros((len(ids), 2, WIDTH), np.float16))
    with pytest.raises(UserError, match="np.savez"):
        Source(_enc({"path": str(squeezed)}))
    other = tmp_path / "other"
    write_features([f"x{i}" for i in range(3)], other, "npy_dir")
    with pytest.raises(UserError, match="none of the dataset's"):
        scan(Source(_enc({"path": str(other)})), recs)
    pixels = tmp_path / "pixels"
    enc = _enc(write_features(ids, pixels, "npz_dir"))
    enc["features_key"] = "feat"
    first = np.load(pixels / f"{ids[0]}.npz")
    np.savez(pixels / f"{ids[0]}.npz", feat=first["feat"], boxes=first["boxes"] * 640)
    with pytest.raises(UserError, match=r"normalised to \[0, 1\]"):
        precomputed_features(recs, enc, tmp_path / "cache")


@pytest.mark.parametrize("mode", ["attention=local", "attention=hierarchical", "attention=graph"])
def test_a_grid_mode_over_regions_is_refused_before_any_work(records, tmp_path, mode):
    from captioning.lit.config_check import ConfigError
    from captioning.lit.training import train

    recs, data = records
    enc = write_features([r.image_id for r in recs], tmp_path / "feats", "npy_dir")
    cfg = compose_cfg(BASE + [mode] + _overrides(enc), tmp_path / "run", tmp_path / "data")
    with pytest.raises(ConfigError, match=f"{mode.split('=')[1]}.*encoder.grid=true"):
        train(cfg)
    assert not (tmp_path / "data").exists()  # nothing generated, nothing copied


def test_relative_2d_reads_boxes_and_is_refused_without_them(records, tmp_path):
    from captioning.lit.training import train

    recs, data = records
    ids = [r.image_id for r in recs]
    plain = write_features(ids, tmp_path / "plain", "npy_dir")
    plain.pop("boxes_path")
    cfg = compose_cfg(BASE + ["attention=scaled_dot", "attention.position_bias=relative_2d"]
                      + _overrides(plain), tmp_path / "run", data)
    with pytest.raises(UserError, match="no boxes"):
        train(cfg)
    # with boxes the bias reads them: moving one box changes that image's attention
    torch.manual_seed(0)
    cfg = compose_cfg(BASE + ["attention=scaled_dot", "attention.position_bias=relative_2d"],
                      Path("/tmp/x"), Path("/tmp/x"))
    c = OmegaConf.to_container(cfg, resolve=True)
    c["encoder"] = {**_enc({"path": "x"}), "pca_dim": None, "normalize": "standard", "whiten_eps": 0.1,
                    "dim": WIDTH}
    model = build_captioner(c, 12).eval()
    with torch.no_grad():
        torch.nn.init.normal_(model.decoder.attention.pos_bias.table, std=1.0)
        raw, boxes = torch.randn(1, 5, WIDTH), torch.tensor(_boxes(np.random.default_rng(1), 5))[None]
        tokens = torch.randint(3, 12, (1, 4))
        _, w1 = model(raw, tokens, boxes=boxes)
        moved = boxes.clone()
        far = [0.0, 0.0, 0.05, 0.05] if boxes[0, 0, 0] > 0.5 else [0.9, 0.9, 1.0, 1.0]
        moved[0, 0] = torch.tensor(far)
        _, w2 = model(raw, tokens, boxes=moved)
        assert not torch.allclose(w1, w2)


def test_grid_features_keep_the_grid_modes(records, tmp_path):
    """CLIP/ViT-style grid features (encoder.grid=true, 9 cells each): local attention trains;
    a file with another cell count is refused."""
    from captioning.lit.training import train

    recs, data = records
    ids = [r.image_id for r in recs]
    enc = write_features(ids, tmp_path / "grid", "npy_dir", regions=(9, 10))
    enc.pop("boxes_path")
    cfg = compose_cfg(BASE + ["debug=fast", "trainer.max_epochs=1", "attention=local", "encoder.grid=true"]
                      + _overrides(enc),
                      tmp_path / "run", data)
    assert json.loads(json.dumps(train(cfg)))["test/bleu4"] >= 0
    np.save(tmp_path / "grid" / f"{ids[0]}.npy", np.zeros((8, WIDTH), np.float16))
    with pytest.raises(UserError, match="square grid"):
        scan(Source(_enc({"path": str(tmp_path / "grid"), "grid": True})), recs, grid=True)


def test_an_interrupted_copy_resumes_where_it_stopped(records, tmp_path, monkeypatch):
    """The copy into the store is written in row order under its manifest: killed midway (here
    an exception at row 40), the next run continues at the first row not counted and ends with
    the same store as one uninterrupted copy."""
    import captioning.data.precomputed as pc

    recs, _ = records
    enc = _enc(write_features([r.image_id for r in recs], tmp_path / "feats", "npz_dir"))
    enc["features_key"] = "feat"
    whole, _ = precomputed_features(recs, enc, tmp_path / "whole")
    monkeypatch.setattr(pc, "BATCH", 16)
    real, seen = pc._read_row, []

    def dies_at_row_40(source, image_id, *args):
        if len(seen) == 40:
            raise KeyboardInterrupt
        seen.append(image_id)
        return real(source, image_id, *args)

    monkeypatch.setattr(pc, "_read_row", dies_at_row_40)
    with pytest.raises(KeyboardInterrupt):
        precomputed_features(recs, enc, tmp_path / "cut")
    store = next((tmp_path / "cut").glob("store_*"))
    assert json.loads((store / "manifest.json").read_text())["rows_done"] == 32  # two whole batches
    monkeypatch.setattr(pc, "_read_row", lambda *a: (seen.append(a[1]), real(*a))[1])
    again, _ = precomputed_features(recs, enc, tmp_path / "cut")
    assert len(seen) == 40 + len(recs) - 32  # rows 32.. read once more, nothing before
    assert np.array_equal(np.asarray(again[:]), np.asarray(whole[:]))
    assert np.array_equal(again.counts, whole.counts)
    assert np.array_equal(np.asarray(again.boxes[:]), np.asarray(whole.boxes[:]))


def test_prepare_data_reports_a_precomputed_set(records, tmp_path):
    """scripts/prepare_data.py's report over precomputed regions: the store it built, its
    padded width, and the images without features, by reason."""
    from captioning.data.dataset_report import data_report, summary

    recs, data = records
    ids = [r.image_id for r in recs]
    folder = tmp_path / "feats"
    enc = _enc(write_features(ids, folder, "npy_dir", regions=(2, 6)))
    (folder / f"{ids[0]}.npy").unlink()
    cfg = compose_cfg(BASE, tmp_path / "run", data)
    data_cfg = {**OmegaConf.to_container(cfg.data, resolve=True), "cache_dir": str(tmp_path / "cache")}
    report = data_report(data_cfg, {**enc, "normalize": "pca_whiten", "pca_dim": None, "whiten_eps": 0.1})
    assert report["store"]["grid"] == "up to 5 regions" and report["store"]["rows"] == len(recs)
    assert report["usable_images"] == len(recs) - 1 and sum(report["skipped"].values()) == 1
    assert report["skipped_files"][0].endswith(f"no features for image id {ids[0]} in {folder}")
    assert f"store: {len(recs)} rows x up to 5 regions, " in summary(report)


def _pixel_layout(ids: list, where: Path, sizes: dict) -> tuple[dict, Path]:
    """bottom-up's layout with pixel boxes: features in <where>/cocobu_att/<id>.npy, boxes in
    <where>/cocobu_box/<id>.npy (pixels of an image of sizes[id]); -> (the encoder overrides
    reading them, a folder of the same boxes normalised by hand)."""
    enc = write_features(ids, where / "cocobu_att", "npy_dir")
    normalised = where / "by_hand"
    pixels = where / "cocobu_box"
    for folder in (normalised, pixels):
        folder.mkdir()
    for i in ids:
        w, h = sizes[str(i)]
        scale = np.asarray([w, h, w, h], np.float32)
        px = np.round(np.load(Path(enc["boxes_path"]) / f"{i}.npy") * scale).astype(np.float32)
        np.save(pixels / f"{i}.npy", px)
        np.save(normalised / f"{i}.npy", px / scale)
    return {**enc, "boxes_path": str(pixels)}, normalised


def test_pixel_boxes_are_refused_by_their_file_and_a_setting_divides_them(records, tmp_path):
    """cocobu_box-style pixel boxes: the refusal names the box file and the setting; with
    encoder.box_units=pixels (sizes from COCO annotations, or from the images' own files) the
    store holds exactly the boxes divided by hand, and training on them gives the same captions
    as training on the hand-normalised files."""
    from captioning.lit.training import train

    recs, data = records
    ids = [r.image_id for r in recs]
    sizes = {str(i): (200 + 37 * (k % 7), 150 + 23 * (k % 5)) for k, i in enumerate(ids)}
    enc, by_hand = _pixel_layout(ids, tmp_path, sizes)
    with pytest.raises(UserError) as refused:
        precomputed_features(recs, _enc(enc), tmp_path / "cache")
    message = str(refused.value)
    assert f"{tmp_path / 'cocobu_box'}/" in message and "cocobu_att" not in message
    assert "encoder.box_units=pixels" in message
    annotations = tmp_path / "captions_train2014.json"
    annotations.write_text(json.dumps({"images": [{"id": i, "width": w, "height": h}
                                                  for i, (w, h) in sizes.items()]}))
    pixels = {**enc, "box_units": "pixels", "image_sizes": [str(annotations)]}
    divided, _ = precomputed_features(recs, _enc(pixels), tmp_path / "cache")
    hand, _ = precomputed_features(recs, _enc({**enc, "boxes_path": str(by_hand)}), tmp_path / "cache")
    assert np.array_equal(divided.boxes[:], hand.boxes[:]) and divided.boxes[:].max() <= 1
    assert divided.path != hand.path  # the units are part of the store's key
    # the sizes from the images' own files (their headers)
    files = {str(r.image_id): r.path for r in recs}
    from PIL import Image

    own = {i: Image.open(p).size for i, p in files.items()}
    enc2, by_hand2 = _pixel_layout(ids, tmp_path / "own", own)
    # (a cache of its own: these files have the names and sizes of the first ones)
    from_files, _ = precomputed_features(recs, _enc({**enc2, "box_units": "pixels"}), tmp_path / "own" / "c")
    hand2, _ = precomputed_features(recs, _enc({**enc2, "boxes_path": str(by_hand2)}), tmp_path / "own" / "c")
    assert np.array_equal(from_files.boxes[:], hand2.boxes[:])
    # trained on, with a position bias that reads the boxes: the same captions
    run = BASE + ["debug=fast", "trainer.max_epochs=1", "decode.beam_size=2", "attention=scaled_dot",
                  "attention.position_bias=relative_2d"]
    captions = []
    for name, over in (("pixels", {**pixels, "image_sizes": f"[{annotations}]"}),
                       ("hand", {**enc, "boxes_path": str(by_hand)})):
        train(compose_cfg(run + _overrides(over), tmp_path / name, data))
        captions.append(json.loads((tmp_path / name / "predictions.json").read_text()))
    assert captions[0] == captions[1]
