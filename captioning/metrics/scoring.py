"""One scoring path: `caption_metrics` scores captions for validation and the test stage
during training, for scripts/evaluate.py and for scripts/score.py alike (nltk BLEU-1..4 and
CIDEr-D on the project's tokens, attribute accuracy where ground-truth objects exist);
`score_captions` adds coco-caption's own figures beside them (`coco_*`: its tokenizer, its
BLEU and CIDEr-D, ROUGE-L, METEOR). Two CIDEr-D figures therefore exist, named by scorer:
`cider` (ours, what training logs and early stopping reads) and `coco_cider` (coco-caption's,
after its own tokenisation: what papers report)."""

from __future__ import annotations

from ..data.vocab import tokenize
from .attributes import attribute_accuracy
from .bleu import corpus_bleu_scores
from .cider import CiderD
from .coco import coco_scores

NLTK_TOKENS = "captioning tokenizer (lower-case, punctuation kept as tokens)"


def caption_metrics(hypotheses: list[list[str]], references: list[list[list[str]]],
                    objects: list[list[dict]] | None = None, prefix: str = "") -> dict[str, float]:
    """Token lists in, {prefix}bleu1..4, {prefix}cider (CIDEr-D with document frequencies from
    these references, as coco-caption computes it) and, with ground-truth `objects`, the
    attribute accuracies: the scores a run logs and evaluate.py reproduces."""
    metrics = corpus_bleu_scores(hypotheses, references, prefix=prefix)
    metrics[f"{prefix}cider"] = CiderD().corpus(hypotheses, references)[0]
    if objects is not None:
        metrics.update(attribute_accuracy(hypotheses, objects, prefix))
    return metrics



def score_captions(
    hypotheses: dict, references: dict, reference_tokens: dict, prefix: str = "test/",
    tokenizer: str = "simple", meteor: bool = True, objects: dict | None = None,
) -> tuple[dict[str, float], dict[str, str]]:
    """{id: caption}, {id: [reference text]}, {id: [reference tokens]} (and {id: objects}) ->
    flat metrics (caption_metrics' beside coco-caption's) and the tokenisation each family
    used. caption_metrics scores `tokenize(caption)` against the reference
    tokens (the same tokens training scores: see captioning.data.records); coco-caption
    tokenises the texts itself."""
    ids = list(hypotheses)
    missing = [i for i in ids if i not in references or i not in reference_tokens]
    if missing:
        raise ValueError(f"{len(missing)} predicted image ids have no references, e.g. {missing[:3]}")
    metrics = caption_metrics([tokenize(hypotheses[i]) for i in ids], [reference_tokens[i] for i in ids],
                              None if objects is None else [objects[i] for i in ids], prefix)
    coco, described = coco_scores(hypotheses, {i: references[i] for i in ids}, tokenizer, meteor)
    metrics.update({f"{prefix}{'coco_cider' if k == 'cider' else k}": v for k, v in coco.items()})
    return metrics, {"nltk": NLTK_TOKENS, "coco": described}


def format_table(metrics: dict[str, float], tokenization: dict[str, str], prefix: str = "test/") -> str:
    """Markdown table: BLEU and CIDEr-D from both scorers side by side (the first column is what
    training logs: results.json), then the coco-only scorers."""
    g = lambda k: metrics.get(prefix + k)  # noqa: E731
    fmt = lambda v: "" if v is None else f"{v:.4f}"  # noqa: E731
    rows = ["| metric | as training scores (nltk, own CIDEr-D) | coco-caption |", "|---|---:|---:|"]
    rows += [f"| BLEU-{n} | {fmt(g(f'bleu{n}'))} | {fmt(g(f'coco_bleu{n}'))} |" for n in range(1, 5)]
    rows.append(f"| CIDEr-D | {fmt(g('cider'))} | {fmt(g('coco_cider'))} |")
    names = (("rouge_l", "ROUGE-L"), ("meteor", "METEOR"))
    rows += [f"| {label} |  | {fmt(g(key))} |" for key, label in names if g(key) is not None]
    if g("meteor") is None:
        rows.append("| METEOR |  | (needs Java) |")
    rows.append(f"\nTokenisation: nltk = {tokenization['nltk']}; coco-caption = {tokenization['coco']}.")
    return "\n".join(rows)
