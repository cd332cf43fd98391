"""coco-caption scorers (pycocoevalcap): BLEU-1..4, CIDEr-D, ROUGE-L, METEOR (needs Java)."""

from __future__ import annotations

import logging
import shutil

from ..data.vocab import tokenize

log = logging.getLogger(__name__)

# PTB-style: the coco-caption tokenizer drops punctuation; our simple tokenizer keeps it as tokens.
_PUNCT = set("''``,.:;?!-()[]{}\"'`")


def _simple(text: str) -> str:
    return " ".join(w for w in tokenize(text) if w not in _PUNCT)


def coco_scores(
    hypotheses: dict, references: dict, tokenizer: str = "simple", meteor: bool = True
) -> tuple[dict[str, float], str]:
    """{id: caption}, {id: [captions]} -> ({coco_bleu1..4, cider, rouge_l[, meteor]}, tokenizer
    description). tokenizer: 'simple' (lower-case, punctuation dropped, pure Python) or 'ptb'
    (coco-caption's Stanford PTB tokenizer, needs Java)."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    res, gts, described = _tokenized(hypotheses, references, tokenizer)
    out: dict[str, float] = {}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    out.update({f"coco_bleu{n}": float(b) for n, b in enumerate(bleu, 1)})
    out["cider"] = float(Cider().compute_score(gts, res)[0])
    out["rouge_l"] = float(Rouge().compute_score(gts, res)[0])
    if meteor and shutil.which("java"):
        from pycocoevalcap.meteor.meteor import Meteor

        try:
            out["meteor"] = float(Meteor().compute_score(gts, res)[0])
        except Exception as err:  # a broken Java install must not lose the other scores
            log.warning("METEOR failed (%s); reported without it", err)
    return out, described


def coco_per_image(hypotheses: dict, references: dict, tokenizer: str = "simple") -> dict:
    """{id: caption}, {id: [captions]} -> {id: {"bleu4", "cider"}}: coco-caption's per-image
    BLEU-4 and CIDEr-D (document frequencies over these images' references, as for its corpus
    score, which is the mean of these CIDEr-D values)."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider

    res, gts, _ = _tokenized(hypotheses, references, tokenizer)
    ids = list(res)
    _, bleu = Bleu(4).compute_score(gts, res, verbose=0)
    _, cider = Cider().compute_score(gts, res)
    return {i: {"bleu4": float(b), "cider": float(c)} for i, b, c in zip(ids, bleu[3], cider)}


def _tokenized(hypotheses: dict, references: dict, tokenizer: str) -> tuple[dict, dict, str]:
    """coco-caption's inputs ({id: [text]} hypotheses, {id: [texts]} references) in the chosen
    tokenisation, and its description."""
    ids = list(hypotheses)
    if tokenizer == "ptb":
        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

        ptb = PTBTokenizer()
        res = ptb.tokenize({i: [{"caption": hypotheses[i]}] for i in ids})
        gts = ptb.tokenize({i: [{"caption": c} for c in references[i]] for i in ids})
        described = "PTB (coco-caption's Stanford tokenizer, punctuation removed)"
    elif tokenizer == "simple":
        res = {i: [_simple(hypotheses[i])] for i in ids}
        gts = {i: [_simple(c) for c in references[i]] for i in ids}
        described = "simple (lower-case, words split on punctuation, punctuation removed)"
    else:
        raise ValueError(f"tokenizer must be 'simple' or 'ptb', got '{tokenizer}'")
    return res, gts, described
