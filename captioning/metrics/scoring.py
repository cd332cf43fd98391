"""One scoring entry point for evaluate.py and score.py: nltk and coco-caption side by side."""

from __future__ import annotations

from ..data.vocab import tokenize
from .bleu import corpus_bleu_scores
from .coco import coco_scores

NLTK_TOKENS = "captioning tokenizer (lower-case, punctuation kept as tokens)"


def score_captions(
    hypotheses: dict, references: dict, reference_tokens: dict, prefix: str = "test/",
    tokenizer: str = "simple", meteor: bool = True,
) -> tuple[dict[str, float], dict[str, str]]:
    """{id: caption}, {id: [reference text]}, {id: [reference tokens]} -> flat metrics and the
    tokenisation each family used. nltk BLEU scores `tokenize(caption)` against the reference
    tokens (the same tokens training scores: see captioning.data.records); coco-caption
    tokenises the texts itself."""
    ids = list(hypotheses)
    missing = [i for i in ids if i not in references or i not in reference_tokens]
    if missing:
        raise ValueError(f"{len(missing)} predicted image ids have no references, e.g. {missing[:3]}")
    metrics = corpus_bleu_scores(
        [tokenize(hypotheses[i]) for i in ids], [reference_tokens[i] for i in ids], prefix=prefix,
    )
    coco, described = coco_scores(hypotheses, {i: references[i] for i in ids}, tokenizer, meteor)
    metrics.update({f"{prefix}{k}": v for k, v in coco.items()})
    return metrics, {"nltk": NLTK_TOKENS, "coco": described}


def format_table(metrics: dict[str, float], tokenization: dict[str, str], prefix: str = "test/") -> str:
    """Markdown table: BLEU from both implementations side by side, then the coco-only scorers."""
    g = lambda k: metrics.get(prefix + k)  # noqa: E731
    fmt = lambda v: "" if v is None else f"{v:.4f}"  # noqa: E731
    rows = ["| metric | nltk corpus_bleu | coco-caption |", "|---|---:|---:|"]
    rows += [f"| BLEU-{n} | {fmt(g(f'bleu{n}'))} | {fmt(g(f'coco_bleu{n}'))} |" for n in range(1, 5)]
    names = (("cider", "CIDEr-D"), ("rouge_l", "ROUGE-L"), ("meteor", "METEOR"))
    rows += [f"| {label} |  | {fmt(g(key))} |" for key, label in names if g(key) is not None]
    if g("meteor") is None:
        rows.append("| METEOR |  | (needs Java) |")
    rows.append(f"\nTokenisation: nltk = {tokenization['nltk']}; coco-caption = {tokenization['coco']}.")
    return "\n".join(rows)
