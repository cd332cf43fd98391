"""Uncertainty for the comparison: t confidence intervals over seeds, and a bootstrap over test
images that recomputes corpus BLEU-4 from per-image n-gram counts (nltk's corpus_bleu, exactly,
but thousands of resamples per second)."""

from __future__ import annotations

import math
from collections import Counter
from typing import NamedTuple

import numpy as np

# Two-sided 95% Student t quantiles t_{0.975, df}, df = 1..30; beyond 30 the normal 1.96 is
# within 2%.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t_interval(values: list[float]) -> dict[str, float]:
    """Mean, sample std and the 95% t interval of the mean (std and CI are nan for one value)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    if n < 2:
        return {"mean": mean, "std": math.nan, "lo": math.nan, "hi": math.nan, "n": n}
    std = float(x.std(ddof=1))
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * std / math.sqrt(n)
    return {"mean": mean, "std": std, "lo": mean - half, "hi": mean + half, "n": n}


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


class RefCounts(NamedTuple):
    """One image's references as bleu_stats reads them: per n, each n-gram's largest count over
    the references, and the references' lengths."""

    best: tuple[Counter, ...]
    lengths: tuple[int, ...]


def reference_counts(references: list[list[str]], max_n: int = 4) -> RefCounts:
    best = []
    for n in range(1, max_n + 1):
        most: Counter = Counter()
        for ref in references:
            most |= _ngrams(ref, n)  # max count of each n-gram over the references
        best.append(most)
    return RefCounts(tuple(best), tuple(len(r) for r in references))


def count_references(references: dict) -> dict:
    """{image_id: [tokens, ...]} -> {image_id: RefCounts}: counted once for every run a report
    scores against them (five references per image are most of bleu_stats' work)."""
    return {i: reference_counts(refs) for i, refs in references.items()}


def bleu_stats(hypothesis: list[str], references: list[list[str]] | RefCounts,
               max_n: int = 4) -> np.ndarray:
    """One image's sufficient statistics for corpus BLEU, as nltk counts them:
    [matches_1..n, totals_1..n, hyp length, closest reference length] (closest; ties: shorter).
    references: the tokenized references, or their reference_counts (the same statistics)."""
    if not isinstance(references, RefCounts):
        references = reference_counts(references, max_n)
    row = []
    for n, best in zip(range(1, max_n + 1), references.best):
        row.append(sum(min(c, best[g]) for g, c in _ngrams(hypothesis, n).items()))
    row += [max(1, len(hypothesis) - n + 1) for n in range(1, max_n + 1)]  # nltk: max(1, .)
    hyp_len = len(hypothesis)
    lengths = references.lengths
    closest = min((abs(r - hyp_len), r) for r in lengths)[1] if lengths else 0
    return np.array(row + [hyp_len, closest], dtype=float)


def bleu_from_stats(stats: np.ndarray, max_n: int = 4) -> np.ndarray:
    """Corpus BLEU-max_n from summed statistics; stats (..., 2*max_n + 2) summed over images
    (any leading dims are separate corpora). 0 when any precision is 0 (nltk, no smoothing)."""
    matches, totals = stats[..., :max_n], stats[..., max_n : 2 * max_n]
    hyp_len, ref_len = stats[..., -2], stats[..., -1]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_p = np.log(matches / totals)  # totals >= 1 per image
        geo = np.exp(log_p.mean(-1))
        bp = np.where(hyp_len < ref_len, np.exp(1 - ref_len / np.maximum(hyp_len, 1e-9)), 1.0)
    score = bp * geo
    return np.where((matches > 0).all(-1) & (hyp_len > 0), score, 0.0)


def bootstrap_indices(m: int, samples: int = 1000, seed: int = 0) -> np.ndarray:
    """(samples, m) image indices drawn with replacement: one bootstrap draw, seeded, so every
    statistic resampled with the same seed resamples the same images."""
    return np.random.default_rng(seed).integers(0, m, size=(samples, m))


def bootstrap_bleu(per_image: list[np.ndarray], samples: int = 1000, seed: int = 0) -> np.ndarray:
    """Resample test images (the same draw for every run) -> (samples,) BLEU-4 of the mean over
    runs. per_image: one (M, 10) bleu_stats array per run, rows aligned by image."""
    idx = bootstrap_indices(per_image[0].shape[0], samples, seed)  # (S, M)
    scores = [bleu_from_stats(stats[idx].sum(1)) for stats in per_image]  # each (S,)
    return np.mean(scores, axis=0)


def percentile_interval(draws: np.ndarray) -> tuple[float, float]:
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))
