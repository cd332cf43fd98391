"""scripts/gallery.py: two runs side by side on every test image, checked with an HTML parser
(entries, captions, scores, files, no URL outside the folder, users' text escaped) and, where
Chromium is installed, in a real browser (sorted, an attention view opened, a screenshot)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from captioning.gallery import build_gallery

ROOT = Path(__file__).resolve().parents[1]
XSS = "<img src=x onerror=alert(1)>"
COLOURS = {"red": (220, 30, 30), "blue": (30, 60, 220), "green": (30, 170, 60)}
PLACES = {"top left": (0, 0), "top right": (1, 0), "bottom left": (0, 1), "bottom right": (1, 1)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, list[Path]]:
    """A Karpathy-format dataset of one coloured square per image (objects given, so attribute
    errors are marked), an XSS reference and an odd file name; two tiny runs (additive, dot)."""
    from conftest import TINY, compose_cfg, shrink

    from captioning.lit import train

    root = tmp_path_factory.mktemp("gallery_data")
    (root / "images").mkdir()
    rng = np.random.default_rng(0)
    images = []
    for i in range(48):
        colour, place = rng.choice(list(COLOURS)), rng.choice(list(PLACES))
        im = Image.new("RGB", (64, 64), (240, 240, 240))
        x, y = PLACES[place]
        ImageDraw.Draw(im).rectangle([8 + 32 * x, 8 + 32 * y, 24 + 32 * x, 24 + 32 * y], fill=COLOURS[colour])
        name = f"{i}.png" if i != 41 else "odd & 'name' <b>.png"
        im.save(root / "images" / name)
        split = "train" if i < 36 else "val" if i < 40 else "test"
        refs = [f"a small {colour} square at the {place}", f"{colour} square in the {place}"]
        if i == 40:
            refs.append(XSS)
        images.append({"filename": name, "filepath": "images", "split": split, "imgid": i,
                       "sentences": [{"raw": r} for r in refs],
                       "objects": [{"colour": colour, "shape": "square", "size": "small",
                                    "position": place}]})
    (root / "dataset.json").write_text(json.dumps({"images": images}))
    base = [o for o in TINY if not o.startswith("data.")] + [
        "data=flickr8k", "encoder.pretrained=false", f"data.json_path={root / 'dataset.json'}",
        f"data.image_root={root}", f"data.cache_dir={root / 'cache'}", "data.min_word_freq=1",
        "data.batch_size=4", "trainer.max_epochs=4", "decode.beam_size=1"]
    dirs = []
    for attention in ("additive", "dot"):
        out = root / attention
        train(shrink(compose_cfg(base + [f"attention={attention}"], out, root)))
        dirs.append(out)
    return root, dirs


class Page(HTMLParser):
    """The parts of index.html the test checks."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[dict] = []
        self.urls: list[str] = []
        self.text: list[str] = []
        self._cell: str | None = None
        self._in_ref = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if key in a:
                self.urls.append(a[key])
        cls = a.get("class", "")
        if tag == "article" and "entry" in cls:
            self.entries.append({"k": int(a["data-k"]), "img": None, "runs": [], "refs": [],
                                 "data": {k: v for k, v in a.items() if k.startswith("data-")}})
        elif not self.entries:
            return
        entry = self.entries[-1]
        if tag == "img" and "photo" in cls:
            entry["img"] = a["src"]
        elif tag == "tr" and "run" in cls:
            entry["runs"].append({"caption": [], "bleu4": "", "cider": ""})
        elif tag == "td" and cls in ("caption", "bleu4", "cider"):
            self._cell = cls
        elif tag == "span" and "errs" in cls:
            self._cell = None  # the error note is not part of the caption
        elif tag == "li":
            self._in_ref = True
            entry["refs"].append("")

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = None
        if tag == "li":
            self._in_ref = False

    def handle_data(self, data):
        self.text.append(data)
        if not self.entries:
            return
        entry = self.entries[-1]
        if self._cell == "caption":
            entry["runs"][-1]["caption"] += data.split()
        elif self._cell in ("bleu4", "cider"):
            entry["runs"][-1][self._cell] += data.strip()
        elif self._in_ref:
            entry["refs"][-1] += data


def _score_script(dataset: Path, run: Path, tmp_path: Path) -> dict:
    out = tmp_path / f"{run.name}_per_image.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "score.py"), str(run / "predictions.json"),
                    str(dataset), "--split", "test", "--no-meteor", "--per-image", str(out)],
                   capture_output=True, text=True, check=True)
    return {int(k): v for k, v in json.loads(out.read_text()).items()}


def test_the_page_holds_every_test_image_with_each_runs_caption_and_scores(runs, tmp_path):
    root, dirs = runs
    out = tmp_path / "gallery"
    summary = build_gallery(dirs, out, names=["additive", "dot <script>"])
    html = (out / "index.html").read_text()
    page = Page()
    page.feed(html)
    tests = [e for e in json.loads((root / "dataset.json").read_text())["images"] if e["split"] == "test"]
    assert summary["images"] == len(page.entries) == len(tests) == 8
    for j, run in enumerate(dirs):
        preds = {p["image_id"]: p["caption"] for p in json.loads((run / "predictions.json").read_text())}
        scores = _score_script(root / "dataset.json", run, tmp_path)
        for entry, image in zip(page.entries, tests):
            shown = entry["runs"][j]
            assert " ".join(shown["caption"]) == preds[image["imgid"]]
            want = scores[image["imgid"]]
            assert float(entry["data"][f"data-bleu4-{j}"]) == pytest.approx(want["bleu4"], abs=1e-6)
            assert float(entry["data"][f"data-cider-{j}"]) == pytest.approx(want["cider"], abs=1e-6)
            assert shown["bleu4"] == f"{want['bleu4']:.3f}" and shown["cider"] == f"{want['cider']:.3f}"
    # every file the page names is in the folder; nothing outside it (no scheme, no /, no ..)
    assert page.urls and all(":" not in u and not u.startswith("/") and ".." not in u for u in page.urls)
    assert all((out / u).is_file() for u in page.urls)
    # users' text is text: the reference, the file name and the run name are escaped
    assert XSS not in html and "<script>" not in html.replace("<script src=", "")
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert XSS in [r for e in page.entries for r in e["refs"]]
    assert "odd & 'name' <b>.png" in "".join(page.text) and "dot <script>" in "".join(page.text)
    # the attention behind each word: one (N,) row per decoded word per run, in data.js
    data = json.loads((out / "data.js").read_text().removeprefix("window.GALLERY = ").rstrip(";\n"))
    first = data["attention"]["0"]
    assert [len(r["weights"]) for r in first] == [len(r["words"]) for r in first]  # a row per word
    assert all(len(w) == data["cells"] for r in first for w in r["weights"])
    assert summary["corpus"][1]["bleu4_minus_first_ci"][0] <= summary["corpus"][1]["bleu4_minus_first_ci"][1]


def test_attribute_errors_are_marked(runs, tmp_path):
    """Each run's wrong attributes per image (as attribute accuracy counts them) are on the page:
    counted in data-err-<run> (what sorting and filtering read) and the wrong words marked."""
    from captioning.metrics.attributes import attribute_errors

    obj = {"colour": "blue", "shape": "square", "size": "small", "position": "top left"}
    assert attribute_errors("a red circle at the top left".split(), obj) == {
        "attributes": {"colour": True, "shape": True, "size": True, "position": False}, "words": [1, 2]}
    root, dirs = runs
    build_gallery(dirs, tmp_path / "g")
    html = (tmp_path / "g" / "index.html").read_text()
    page = Page()
    page.feed(html)
    images = [e for e in json.loads((root / "dataset.json").read_text())["images"] if e["split"] == "test"]
    marked = 0
    for j, run in enumerate(dirs):
        preds = {p["image_id"]: p["caption"] for p in json.loads((run / "predictions.json").read_text())}
        for entry, image in zip(page.entries, images):
            errors = attribute_errors(preds[image["imgid"]].split(), image["objects"][0])
            assert int(entry["data"][f"data-err-{j}"]) == sum(errors["attributes"].values())
            marked += len(errors["words"])
    assert html.count("class='w bad'") == marked


CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium-headless-shell)")
def test_a_browser_sorts_and_opens_the_attention_view(runs, tmp_path):
    """Headless Chromium loads the page from disk with the view in its address (sorted by
    additive's BLEU-4 minus dot's, the first image's attention open): the DOM shows that image
    first with both captions, and the screenshot shows the attention maps."""
    root, dirs = runs
    out = tmp_path / "gallery"
    build_gallery(dirs, out, names=["additive", "dot"])
    page = Page()
    page.feed((out / "index.html").read_text())
    diff = {e["k"]: float(e["data"]["data-bleu4-0"]) - float(e["data"]["data-bleu4-1"]) for e in page.entries}
    best = sorted(diff, key=lambda k: (-diff[k], k))[0]
    url = (out / "index.html").as_uri() + "#sort=diff&metric=bleu4&a=0&b=1&dir=desc&open=first"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1400",
             "--virtual-time-budget=8000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120).stdout
    shown = Page()
    shown.feed(dom)
    order = [int(k) for k in re.findall(r'<article class="entry" id="e(\d+)"', dom)]
    assert len(shown.entries) == 8 and order[0] == best, (order, diff)
    assert [e["k"] for e in shown.entries] == order and shown.entries[0]["k"] == best
    opened = dom.split(f'id="e{best}"')[1].split("</article>")[0]
    panel = re.search(r'<div class="attention"[^>]*>', opened).group(0)
    assert "hidden" not in panel and opened.count("<canvas") >= 3  # colour bar + a map per run
    preds = [json.loads((d / "predictions.json").read_text()) for d in dirs]
    images = json.loads((root / "dataset.json").read_text())["images"]
    ids = [e["imgid"] for e in images if e["split"] == "test"]
    for j in range(2):
        want = {p["image_id"]: p["caption"] for p in preds[j]}[ids[best]]
        assert " ".join(shown.entries[0]["runs"][j]["caption"]) == want
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", url], capture_output=True, timeout=120)
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert pixels.std() > 10  # not blank
    cyan = (abs(pixels - np.array([0, 229, 255])).sum(-1) < 60).sum()
    assert cyan > 20, "the attention maps' outline (and the colour bar's uniform mark) are on screen"


def test_the_gallery_re_decodes_the_runs_own_captions_and_counts_a_planted_difference(runs, tmp_path):
    """On the machine that trained them, every re-decoded caption is the run's own (the
    attention drawn belongs to the caption scored); a caption changed in a copy of a run's
    predictions.json is counted and said on the page."""
    _, dirs = runs
    summary = build_gallery(dirs, tmp_path / "same")
    assert [r["redecoded_differs"] for r in summary["runs"]] == [0, 0]
    planted = tmp_path / "planted"
    shutil.copytree(dirs[1], planted)
    preds = json.loads((planted / "predictions.json").read_text())
    preds[0]["caption"] = "a caption no model wrote"
    (planted / "predictions.json").write_text(json.dumps(preds))
    summary = build_gallery([dirs[0], planted], tmp_path / "changed")
    assert [r["redecoded_differs"] for r in summary["runs"]] == [0, 1]
    assert "1 caption(s) re-decoded here differ" in (tmp_path / "changed" / "index.html").read_text()
