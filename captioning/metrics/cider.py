"""CIDEr-D in-process, vectorised (numpy; no Java, no subprocess): the metric coco-caption
reports as "CIDEr" (pycocoevalcap's Cider: tf-idf n-gram vectors for n = 1..4, the hypothesis's
weights clipped to the reference's, a Gaussian length penalty with sigma 6, the mean over n and
over references, times 10), and the reward of self-critical training.

Document frequencies, two modes:
- `CiderD()` (corpus mode): from the references of the images being scored, as pycocoevalcap
  does. Use it for reported metrics; a one-image corpus then scores 0 (log(1) = 0), as there.
- `CiderD(train_refs)` (fixed mode): from a fixed reference set, counted once (the SCST reward:
  a batch's score must not depend on which images share the batch).

Only tokenisation is Python; n-gram matching for all (hypothesis, reference) pairs at once is one
sorted-key intersection.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

Tokens = Sequence[str]


class _NgramIds:
    """Every n-gram seen gets an integer id; sentences become (ids, counts, orders) arrays."""

    def __init__(self, n: int) -> None:
        self.n, self.ids = n, {}

    def sentence(self, tokens: Tokens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        counts: dict[tuple, int] = defaultdict(int)
        for k in range(1, self.n + 1):
            for i in range(len(tokens) - k + 1):
                counts[tuple(tokens[i : i + k])] += 1
        ids = np.fromiter((self.ids.setdefault(g, len(self.ids)) for g in counts), np.int64, len(counts))
        tf = np.fromiter(counts.values(), np.float64, len(counts))
        order = np.fromiter((len(g) - 1 for g in counts), np.int64, len(counts))
        return ids, tf, order


class CiderD:
    """CIDEr-D scorer. `df_refs`: None (corpus mode: document frequencies from the references
    being scored) or per image its reference token lists (fixed mode, counted once here)."""

    def __init__(self, df_refs: Sequence[Sequence[Tokens]] | None = None, n: int = 4,
                 sigma: float = 6.0) -> None:
        self.n, self.sigma = n, sigma
        self._fixed: tuple[dict[tuple, int], float] | None = None
        if df_refs is not None:
            self._fixed = (self._document_frequency(df_refs), float(np.log(len(df_refs))))

    def _document_frequency(self, refs: Sequence[Sequence[Tokens]]) -> dict[tuple, int]:
        """n-gram -> the number of images whose references contain it."""
        df: dict[tuple, int] = defaultdict(int)
        for image_refs in refs:
            seen = {tuple(r[i : i + k]) for r in image_refs for k in range(1, self.n + 1)
                    for i in range(len(r) - k + 1)}
            for g in seen:
                df[g] += 1
        return df

    def corpus(self, hyps: Sequence[Tokens], refs: Sequence[Sequence[Tokens]]) -> tuple[float, np.ndarray]:
        """One hypothesis per image -> (corpus score = mean over images, per-image scores)."""
        scores = self.score(hyps, np.arange(len(hyps)), refs)
        return float(scores.mean()) if len(scores) else 0.0, scores

    def score(self, hyps: Sequence[Tokens], image: Sequence[int] | np.ndarray,
              refs: Sequence[Sequence[Tokens]]) -> np.ndarray:
        """Any number of hypotheses, hypothesis h describing image image[h] (SCST: K samples per
        image) -> (H,) CIDEr-D scores against that image's references."""
        image = np.asarray(image, dtype=np.int64)
        df, log_n = self._fixed if self._fixed is not None else (
            self._document_frequency(refs), float(np.log(len(refs))))
        grams = _NgramIds(self.n)
        hyp = [grams.sentence(h) for h in hyps]
        ref = [[grams.sentence(r) for r in image_refs] for image_refs in refs]
        # idf per n-gram id: log(N) - log(max(1, df))
        by_id = [None] * len(grams.ids)
        for g, i in grams.ids.items():
            by_id[i] = g
        idf = log_n - np.log(np.maximum(1.0, np.array([df.get(g, 0) for g in by_id], np.float64)))

        # Pairs: every hypothesis with every reference of its image.
        pair_hyp = np.repeat(np.arange(len(hyps)), [len(ref[i]) for i in image])  # (P,)
        pair_ref = [r for i in image for r in ref[i]]  # P sentences
        width = len(grams.ids) + 1

        def flat(sentences, owners):
            """(key = owner * width + id, weight, order, owner) of all entries, and per owner the
            norm per order (P, n) and the length (bigram count, as coco-caption counts it)."""
            ids = np.concatenate([s[0] for s in sentences]) if sentences else np.zeros(0, np.int64)
            tf = np.concatenate([s[1] for s in sentences]) if sentences else np.zeros(0)
            order = np.concatenate([s[2] for s in sentences]) if sentences else np.zeros(0, np.int64)
            owner = np.repeat(owners, [len(s[0]) for s in sentences])
            w = tf * idf[ids]
            norm = np.bincount(owner * self.n + order, w * w, len(owners) * self.n).astype(np.float64)
            norm = np.sqrt(norm).reshape(-1, self.n)
            length = np.bincount(owner, tf * (order == 1), len(owners)).astype(np.float64)
            return owner * width + ids, w, order, norm, length

        pairs = np.arange(len(pair_hyp))
        h_key, h_w, h_order, h_norm, h_len = flat([hyp[h] for h in pair_hyp], pairs)
        r_key, r_w, _, r_norm, r_len = flat(pair_ref, pairs)
        _, hi, ri = np.intersect1d(h_key, r_key, assume_unique=True, return_indices=True)
        matched = np.minimum(h_w[hi], r_w[ri]) * r_w[ri]  # clipped to the reference's weight
        pair_of = h_key[hi] // width
        # (float64 even when nothing matched: bincount of nothing is int64)
        val = np.bincount(pair_of * self.n + h_order[hi], matched, len(pairs) * self.n).astype(np.float64)
        val = val.reshape(-1, self.n)  # (P, n)
        denom = h_norm * r_norm
        val = np.divide(val, denom, out=np.zeros_like(val), where=denom != 0)
        val *= np.exp(-((h_len - r_len) ** 2) / (2 * self.sigma**2))[:, None]
        per_pair = val.mean(1)  # mean over n-gram orders
        total = np.bincount(pair_hyp, per_pair, len(hyps)).astype(np.float64)
        count = np.bincount(pair_hyp, minlength=len(hyps))
        return 10.0 * total / np.maximum(count, 1)
