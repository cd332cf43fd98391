"""Images that fight back: every PIL mode, EXIF rotation, bombs, broken and escaping files,
odd captions; one by one, then a whole Flickr-style folder trained on end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from PIL import Image

from captioning.data.images import MAX_PIXELS, read_image
from captioning.lit import train

RED, BLUE = (220, 20, 20), (20, 20, 220)


def _halves(width: int, height: int) -> Image.Image:
    """Left half red, right half blue."""
    arr = np.zeros((height, width, 3), np.uint8)
    arr[:, : width // 2], arr[:, width // 2 :] = RED, BLUE
    return Image.fromarray(arr)


def _make_odd_images(d: Path) -> dict[str, Path]:
    """Valid but unusual files (each must be read)."""
    d.mkdir(parents=True, exist_ok=True)
    files = {}
    Image.new("L", (40, 30), 100).save(files.setdefault("gray", d / "gray.png"))
    rgba = Image.new("RGBA", (20, 20), (0, 0, 0, 0))  # transparent pixels that store black
    rgba.paste((255, 0, 0, 255), (0, 0, 10, 20))
    rgba.save(files.setdefault("rgba", d / "rgba.png"))
    pal = Image.new("P", (20, 20), 0)
    pal.putpalette([0, 0, 0, 0, 200, 0] + [0] * 762)  # index 0 black (transparent), 1 green
    pal.paste(1, (10, 0, 20, 20))
    pal.save(files.setdefault("palette", d / "palette.png"), transparency=0)
    Image.new("CMYK", (24, 24), (0, 255, 255, 0)).save(files.setdefault("cmyk", d / "cmyk.jpg"))
    Image.fromarray(np.full((8, 8), 32768, np.uint16)).save(files.setdefault("gray16", d / "gray16.png"))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    _halves(40, 20).save(files.setdefault("rotated", d / "rotated.jpg"), quality=95, exif=exif)
    Image.new("RGB", (1, 1), (10, 200, 10)).save(files.setdefault("tiny", d / "tiny.png"))
    Image.new("RGB", (3000, 2000), (90, 90, 90)).save(files.setdefault("large", d / "large.jpg"))
    return files


def _make_broken_files(d: Path, outside: Path) -> dict[str, Path]:
    """Files that must be skipped, by reason."""
    d.mkdir(parents=True, exist_ok=True)
    files = {}
    Image.new("RGB", (4000, 3000), (1, 2, 3)).save(files.setdefault("bomb", d / "bomb.png"))  # 12 M px
    good = d / "whole.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(good)
    (d / "truncated.jpg").write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    good.unlink()
    files["truncated"] = d / "truncated.jpg"
    (files.setdefault("empty", d / "empty.jpg")).write_bytes(b"")
    (files.setdefault("text", d / "notes.jpg")).write_text("not an image at all")
    files["missing"] = d / "missing.jpg"
    outside.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (10, 10)).save(outside)
    files["dotdot"] = d / os.path.relpath(outside, d)  # images/../../elsewhere/secret.png
    os.symlink(outside, d / "link_out.png")
    files["symlink_out"] = d / "link_out.png"
    files["absolute"] = outside.resolve()
    return files


def test_every_mode_becomes_the_rgb_a_viewer_shows(tmp_path):
    f = _make_odd_images(tmp_path)
    px = {k: read_image(p, 16)[0] for k, p in f.items()}
    assert all(v is not None and v.shape == (16, 16, 3) and v.dtype == np.uint8 for v in px.values())
    assert (px["gray"] == 100).all()
    assert tuple(px["rgba"][8, 2]) == (255, 0, 0) and tuple(px["rgba"][8, 13]) == (255, 255, 255)
    assert tuple(px["palette"][8, 2]) == (255, 255, 255) and tuple(px["palette"][8, 13]) == (0, 200, 0)
    assert px["cmyk"][8, 8, 0] > 200 and px["cmyk"][8, 8, 1:].max() < 60  # red, not black or cyan
    assert (px["gray16"] == 128).all()  # 32768 / 65535 scaled, not clipped to 255
    assert tuple(px["tiny"][0, 0]) == (10, 200, 10)
    # Orientation 6: the red left half is shown on top. Without EXIF it would stay on the left.
    rot = px["rotated"].astype(int)
    assert rot[2, 8, 0] > 150 and rot[2, 8, 2] < 100  # top: red
    assert rot[13, 8, 2] > 150 and rot[13, 8, 0] < 100  # bottom: blue
    assert Image.MAX_IMAGE_PIXELS == MAX_PIXELS  # the limit is restored after each read


def test_broken_and_escaping_files_give_reasons_not_exceptions(tmp_path):
    root = tmp_path / "root"
    f = _make_broken_files(root / "images", tmp_path / "elsewhere" / "secret.png")
    why = {k: read_image(p, 16, max_pixels=5000, root=root)[1] for k, p in f.items()}
    assert "too large" in why["bomb"] and "data.max_image_pixels" in why["bomb"]
    assert why["truncated"].startswith("not a readable image")
    assert why["empty"] == "empty file (0 bytes)"
    assert why["text"].startswith("not a readable image")
    assert why["missing"] == "missing file"
    for key in ("dotdot", "symlink_out", "absolute"):
        assert "outside the image root" in why[key], key
    # Between the limit and twice the limit PIL only warns: refused all the same.
    Image.new("RGB", (80, 80)).save(root / "images" / "big.png")  # 6400 > 5000 < 10000
    assert "too large" in read_image(root / "images" / "big.png", 16, max_pixels=5000)[1]
    # Negative control: the same files are fine without a root and with the default limit.
    assert read_image(f["bomb"], 16)[1] is None and read_image(f["symlink_out"], 16)[1] is None
    inside = root / "images" / "link_in.png"
    os.symlink(root / "images" / "bomb.png", inside)
    assert read_image(inside, 16, root=root)[1] is None  # a link that stays inside is fine


def test_a_flickr_style_folder_trains_and_reports_exactly_the_broken_files(tmp_path):
    from conftest import TINY, compose_cfg, shrink

    root = tmp_path / "flickr"
    odd = _make_odd_images(root / "images")
    broken = _make_broken_files(root / "images", tmp_path / "elsewhere" / "secret.png")
    rng = np.random.default_rng(1)
    plain = []
    for i in range(26):
        p = root / "images" / f"p{i}.jpg"
        Image.fromarray(rng.integers(0, 255, (48, 48, 3), np.uint8)).save(p)
        plain.append(p)
    caption = [{"raw": "A man in a red T-shirt."}, {"raw": "Ein Mann im Café, lächelnd!"}]
    entries = []

    def add(path: Path, split: str, sentences=caption) -> None:
        if path.is_absolute() and not str(path).startswith(str(root)):  # an absolute filename
            folder, name = "", str(path)
        else:
            folder, name = os.path.split(os.path.relpath(path, root))
        entries.append({"filepath": folder, "filename": name, "split": split, "imgid": len(entries),
                        "sentences": sentences})

    for k, p in enumerate(plain[:24]):
        add(p, ["train", "train", "val", "test"][k % 4])
    for p in odd.values():
        add(p, "test")
    for p in broken.values():
        add(p, "train")
    add(plain[24], "train", [{"raw": "..."}, {"raw": "  "}, {"raw": "A dog."}])  # two empty captions
    add(plain[25], "train", [{"raw": "?!"}])  # no caption left: skipped with its reason
    (root / "dataset.json").write_text(json.dumps({"images": entries}))

    overrides = [o for o in TINY if not o.startswith("data.")] + [
        "data=flickr8k", "encoder.pretrained=false", f"data.json_path={root / 'dataset.json'}",
        f"data.image_root={root}",
        f"data.cache_dir={tmp_path / 'cache'}", "data.min_word_freq=1", "data.batch_size=4",
        "data.eval_batch_size=16", "data.max_image_pixels=10000000", "trainer.max_epochs=1",
        "decode.beam_size=1",
    ]
    out = tmp_path / "run"
    results = train(shrink(compose_cfg(overrides, out, tmp_path)))

    norm = os.path.normpath
    skipped = {norm(line.split("\t")[0]): line.split("\t")[1]
               for line in (out / "skipped_images.txt").read_text().splitlines()}
    expected = {norm(p) for p in broken.values()} | {norm(plain[25])}
    assert set(skipped) == expected, set(skipped) ^ expected
    assert "too large" in skipped[norm(broken["bomb"])]  # 12 M pixels > 10 M; large.jpg (6 M) is read
    assert skipped[norm(plain[25])] == "no caption with a word left after tokenisation"
    assert results["skipped_images"] == len(broken) + 1 == len(results["skipped_image_files"])  # by entry
    assert results["empty_captions"] == 3  # "...", "  " and "?!"
    preds = {p["image_id"] for p in json.loads((out / "predictions.json").read_text())}
    odd_names = {p.name for p in odd.values()}
    assert {e["imgid"] for e in entries if e["filename"] in odd_names} <= preds  # none dropped
    # The same folder as COCO annotations (+ the Karpathy JSON for splits) and as CSV: the same
    # records (paths, splits, captions, dropped counts), broken and escaping entries included.
    import csv

    from captioning.data.formats import load_records

    def view(records):
        return [(os.path.normpath(r.path), r.split, r.captions, r.texts, r.empty_captions) for r in records]

    coco = {"images": [{"id": e["imgid"], "file_name": os.path.join(e["filepath"], e["filename"])}
                       for e in entries],
            "annotations": [{"image_id": e["imgid"], "caption": s["raw"]} for e in entries
                            for s in e["sentences"]]}
    (root / "coco.json").write_text(json.dumps(coco))
    karpathy = load_records(root / "dataset.json", root)
    assert view(load_records(root / "coco.json", root, "coco", split_file=str(root / "dataset.json"))) \
        == view(karpathy)
    with open(root / "captions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image", "caption", "split"])
        w.writerows([os.path.join(e["filepath"], e["filename"]), s["raw"], e["split"]]
                    for e in entries for s in e["sentences"])
    by_csv = {os.path.normpath(r.path): r for r in load_records(root / "captions.csv", root, "csv")}
    # CSV keys images by file: an image listed twice in the JSON is one CSV image (none is here).
    assert [view([by_csv[os.path.normpath(r.path)]])[0] for r in karpathy] == view(karpathy)

    from captioning import load_checkpoint

    _, vocab, _ = load_checkpoint(out / "checkpoints" / "last.ckpt")
    assert {"café", "lächelnd", "t", "-", "shirt"} <= set(vocab.itos)  # non-ASCII kept


def test_every_data_preset_states_the_default_pixel_limit(tmp_path):
    """conf/data/*.yaml carry the key, themselves or through the base they extend (so
    `data.max_image_pixels=...` overrides without +), and its value is the code's default."""
    from conftest import compose_cfg

    for preset in sorted((Path(__file__).resolve().parents[1] / "conf" / "data").glob("*.yaml")):
        cfg = compose_cfg([f"data={preset.stem}"], tmp_path, tmp_path)
        assert cfg.data.max_image_pixels == MAX_PIXELS, preset.name
