"""ImageCaptioner: a checkpoint captions images from Python in two calls, equal to the run's own
test-stage captions on the same images, with each word's attention as a map over the image."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from captioning import ImageCaptioner
from captioning.lit import train


def _train(root: Path, precision: str, attention: str = "additive") -> tuple[Path, Path]:
    from conftest import TINY, compose_cfg, shrink

    # four epochs: after two, a tiny run may still caption every image alike (some CPUs, some
    # seeds), and then "the run's own captions" cannot tell one image's from another's
    cfg = shrink(compose_cfg(TINY + ["trainer.max_epochs=4", "decode.beam_size=1", f"attention={attention}",
                                     f"trainer.precision={precision}"], root / "run", root / "data"))
    train(cfg)
    return Path(cfg.paths.output_dir), root / "data"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("inference"), "32-true")


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("inference_bf16"), "bf16-mixed")


@pytest.fixture(scope="module")
def adaptive_run(tmp_path_factory):
    """Adaptive attention: its weights over the image sum to 1 - the sentinel's share."""
    return _train(tmp_path_factory.mktemp("inference_adaptive"), "32-true", "adaptive")


def _test_images(data: Path) -> dict:
    """image_id -> its file, from the dataset's own listing."""
    (listing,) = data.glob("synthetic/*/dataset.json")
    return {str(im["imgid"]): listing.parent / im["filepath"] / im["filename"]
            for im in json.loads(listing.read_text())["images"] if im["split"] == "test"}


@pytest.mark.parametrize("which", ["run", "bf16_run", "adaptive_run"])
def test_the_test_splits_images_get_the_runs_own_captions(which, request):
    """On the machine and in the precision of the run (bf16-mixed: decoded under bf16 autocast,
    in its test stage's batches): the API and evaluate.py give its test stage's own captions."""
    from captioning.evaluation import decode_split

    out, data = request.getfixturevalue(which)
    predictions = json.loads((out / "predictions.json").read_text())
    files = _test_images(data)
    cap = ImageCaptioner.from_checkpoint(out / "checkpoints" / "best.ckpt", device="cpu")
    results = cap([files[str(p["image_id"])] for p in predictions])
    assert [r.caption for r in results] == [p["caption"] for p in predictions]
    _, records, decoded, _ = decode_split(out / "checkpoints" / "best.ckpt", "test", device="cpu")
    by_file = {str(files[str(p["image_id"])].resolve()): p["caption"] for p in predictions}
    assert [" ".join(c.words) for c in decoded] == [by_file[str(r.path.resolve())] for r in records]
    assert len({p["caption"] for p in predictions}) > 1  # the images are told apart: a real check


def test_every_kind_of_image_gives_the_same_caption_and_a_bad_file_is_named(run, tmp_path):
    out, data = run
    path = next(iter(_test_images(data).values()))
    pil = Image.open(path)
    array = np.array(pil.convert("RGB"))
    (tmp_path / "broken.png").write_bytes(b"not an image")
    cap = ImageCaptioner.from_checkpoint(out / "checkpoints" / "best.ckpt", device="cpu", batch_size=2)
    results = cap([path, pil, array, torch.from_numpy(array).permute(2, 0, 1), tmp_path / "broken.png",
                   pil.convert("RGBA")])
    assert len({r.caption for r in results if not r.error}) == 1 and results[0].caption
    assert [bool(r.error) for r in results] == [False, False, False, False, True, False]
    assert "not a readable image" in results[4].error
    assert cap(path).pop().caption == results[0].caption  # one image alone, as a batch of one


@pytest.mark.parametrize("which", ["run", "adaptive_run"])
def test_each_words_map_spreads_its_keys_weights_over_their_blocks(which, request):
    out, data = request.getfixturevalue(which)
    cap = ImageCaptioner.from_checkpoint(out / "checkpoints" / "best.ckpt", device="cpu")
    path = next(iter(_test_images(data).values()))
    wide = Image.open(path).convert("RGB").resize((70, 45))  # not square, not a multiple of the grid
    (result,) = cap(wide)
    maps = result.maps
    assert maps.shape == (len(result.words), 45, 70)
    side = int(result.weights.shape[-1] ** 0.5)
    for i in range(side):
        for j in range(side):
            rows = slice(-(-i * 45 // side), -(-(i + 1) * 45 // side))
            cols = slice(-(-j * 70 // side), -(-(j + 1) * 70 // side))
            block = maps[:, rows, cols]
            assert block.size and np.allclose(block, result.weights[:, i * side + j, None, None].numpy())
    share = np.asarray(result.sentinel)  # (words,) what each word's map leaves off the image
    assert np.allclose(share, 1 - result.weights.sum(-1).numpy(), atol=1e-6)
    if which == "run":
        assert np.allclose(share, 0, atol=1e-5)  # additive: every weight on the image
    else:  # the trained sentinel takes a real share, different per word
        assert (share > 1e-3).all() and (share < 1).all() and share.std() > 1e-4, share
    assert result.figure().ndim == 3
