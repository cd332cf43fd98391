import math
import random

import numpy as np
import pytest
from nltk.translate.bleu_score import corpus_bleu

from captioning.metrics.stats import (
    bleu_from_stats,
    bleu_stats,
    bootstrap_bleu,
    count_references,
    percentile_interval,
    t_interval,
)


def test_t_interval_by_hand():
    # mean 2, sample std 1, n 3: half width = t(0.975, 2) * 1 / sqrt(3) = 4.303 / 1.732
    out = t_interval([1.0, 2.0, 3.0])
    assert out["mean"] == 2.0 and out["std"] == 1.0
    assert out["hi"] - out["mean"] == pytest.approx(4.303 / math.sqrt(3))
    assert math.isnan(t_interval([0.5])["lo"])


def test_bleu_from_stats_equals_nltk_corpus_bleu():
    rng = random.Random(0)
    words = "a red blue circle square small big on the left of".split()
    for trial in range(30):
        hyps, refs = [], []
        for _ in range(rng.randint(1, 8)):
            hyps.append([rng.choice(words) for _ in range(rng.randint(0, 9))])
            refs.append([[rng.choice(words) for _ in range(rng.randint(1, 9))]
                         for _ in range(rng.randint(1, 3))])
        stats = np.stack([bleu_stats(h, r) for h, r in zip(hyps, refs)])
        ours = float(bleu_from_stats(stats.sum(0)))
        ref = corpus_bleu(refs, hyps)
        assert ours == pytest.approx(ref, abs=1e-12), trial
        counted = count_references(dict(enumerate(refs)))  # counted once, as reports do
        assert (np.stack([bleu_stats(h, counted[k]) for k, h in enumerate(hyps)]) == stats).all()


def test_bootstrap_by_hand():
    """Two images: a perfect 4-word caption and an empty one. A resample holds two perfect
    (p 1/4: BLEU 1), two empty (p 1/4: BLEU 0) or one of each (p 1/2). In the mixed case nltk
    counts the empty caption as one n-gram of every order (denominator max(1, .)): precisions
    4/5, 3/4, 2/3, 1/2 -> geometric mean 0.2 ** 0.25, times brevity exp(1 - 8/4)."""
    ref = "a b c d".split()
    perfect, empty = bleu_stats(ref, [ref]), bleu_stats([], [ref])
    mixed = math.exp(-1) * 0.2**0.25
    assert corpus_bleu([[ref], [ref]], [ref, []]) == pytest.approx(mixed)
    draws = bootstrap_bleu([np.stack([perfect, empty])], samples=4000, seed=1)
    assert set(np.round(draws, 9)) == {1.0, round(mixed, 9), 0.0}
    assert (draws == 1.0).mean() == pytest.approx(0.25, abs=0.03)
    assert (draws == 0.0).mean() == pytest.approx(0.25, abs=0.03)
    assert percentile_interval(draws) == (0.0, 1.0)
    # Two runs: the draw is shared, so the mean of identical runs equals either run.
    pair = bootstrap_bleu([np.stack([perfect, empty])] * 2, samples=500, seed=1)
    assert np.allclose(pair, bootstrap_bleu([np.stack([perfect, empty])], samples=500, seed=1))
