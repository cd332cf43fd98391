"""Corpus BLEU-1..4 with nltk, on words, against all references."""

from __future__ import annotations

from nltk.translate.bleu_score import corpus_bleu


def corpus_bleu_scores(
    hypotheses: list[list[str]], references: list[list[list[str]]], prefix: str = ""
) -> dict[str, float]:
    """{prefix}bleu1..4 on a 0-1 scale (nltk method0: 0 when a precision is 0, no smoothing)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} reference sets")
    if not hypotheses:
        return {f"{prefix}bleu{n}": 0.0 for n in range(1, 5)}
    weights = [(1.0,), (0.5, 0.5), (1 / 3, 1 / 3, 1 / 3), (0.25, 0.25, 0.25, 0.25)]
    scores = corpus_bleu(references, hypotheses, weights=weights)
    return {f"{prefix}bleu{n}": float(s) for n, s in enumerate(scores, start=1)}
