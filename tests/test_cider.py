"""CIDEr-D in-process equals pycocoevalcap's Cider (the coco-caption reference code) to 1e-6."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pycocoevalcap.cider.cider import Cider

from captioning.metrics.cider import CiderD

WORDS = "a the red blue green big small square circle triangle is on left right top of and".split()


def sentence(rng: random.Random, lo: int = 5, hi: int = 14) -> list[str]:
    return [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]


def edited(rng: random.Random, ref: list[str], how: str) -> list[str]:
    """A hypothesis made from a reference, so scores are far from 0."""
    out = list(ref)
    if how == "substitute":
        for _ in range(rng.randint(1, 3)):
            out[rng.randrange(len(out))] = rng.choice(WORDS)
    elif how == "repeat":  # repeated n-grams: the clipping
        i = rng.randrange(len(out) - 1)
        out = out[: i + 2] + out[i : i + 2] * rng.randint(2, 4) + out[i + 2 :]
    elif how == "short":  # much shorter: the length penalty
        out = out[: rng.randint(1, 3)]
    elif how == "long":  # much longer
        out = out + sentence(rng, 8, 20)
    elif how == "drop":
        del out[rng.randrange(len(out))]
    return out


def corpus(seed: int, images: int) -> tuple[list[list[str]], list[list[list[str]]]]:
    rng = random.Random(seed)
    refs = [[sentence(rng) for _ in range(rng.randint(3, 5))] for _ in range(images)]
    hows = ["substitute", "repeat", "short", "long", "drop", "same"]
    hyps = [edited(rng, rng.choice(r), hows[(seed + i) % len(hows)]) for i, r in enumerate(refs)]
    return hyps, refs


def reference(hyps, refs) -> tuple[float, np.ndarray]:
    gts = {i: [" ".join(r) for r in rs] for i, rs in enumerate(refs)}
    res = {i: [" ".join(h)] for i, h in enumerate(hyps)}
    score, scores = Cider().compute_score(gts, res)
    return score, np.asarray(scores)


@pytest.mark.parametrize("seed", range(32))
def test_matches_pycocoevalcap(seed):
    images = 1 if seed == 0 else (seed % 11) + 2  # a one-image corpus, then 3..12 images
    hyps, refs = corpus(seed, images)
    want, want_each = reference(hyps, refs)
    got, got_each = CiderD().corpus(hyps, refs)
    assert got_each == pytest.approx(want_each, abs=1e-6)
    assert got == pytest.approx(want, abs=1e-6)
    if images > 1:
        assert want > 0.3  # edited references: far from 0, so the comparison means something


def test_nothing_in_common_and_empty_hypotheses_score_zero_as_in_pycocoevalcap():
    """A blind or broken model's captions: no n-gram shared with any reference, or no word."""
    hyps, refs = corpus(3, 4)
    hyps = [["zzz", "qqq"], [], hyps[2], ["zzz"]]
    want, want_each = reference(hyps, refs)
    got, got_each = CiderD().corpus(hyps, refs)
    assert got_each == pytest.approx(want_each, abs=1e-6) and got == pytest.approx(want, abs=1e-6)
    assert got_each[0] == got_each[1] == 0.0
    assert CiderD().corpus([["zzz"], ["qqq"]], refs[:2])[0] == 0.0  # no match anywhere


def test_clipping_and_length_penalty_do_their_jobs():
    refs = [[["a", "red", "square", "on", "the", "left"]] * 2, [["a", "blue", "circle"]] * 2,
            [["a", "green", "triangle"]] * 2]
    scorer = CiderD()
    exact = scorer.corpus([refs[0][0], refs[1][0], refs[2][0]], refs)[1][0]
    stutter = scorer.corpus([["a", "red", "red", "red", "square", "on", "the", "left"], refs[1][0],
                             refs[2][0]], refs)[1][0]
    short = scorer.corpus([["a", "red"], refs[1][0], refs[2][0]], refs)[1][0]
    assert exact > stutter > 0 and exact > short > 0


def test_fixed_document_frequencies_and_many_samples_per_image():
    """SCST: K samples per image scored against fixed (training) document frequencies: a
    sample's score does not depend on the other images in the batch."""
    hyps, refs = corpus(5, 8)
    scorer = CiderD(refs)  # frequencies counted once from these references
    samples = [h for h in hyps for _ in range(3)]
    image = np.repeat(np.arange(8), 3)
    all_at_once = scorer.score(samples, image, refs)
    alone = scorer.score(samples[:3], [0, 0, 0], refs)  # only image 0's samples
    assert all_at_once[:3] == pytest.approx(alone)
    # with the scored references as the frequency source it equals the corpus mode
    assert CiderD(refs).score(hyps, np.arange(8), refs) == pytest.approx(CiderD().corpus(hyps, refs)[1])
