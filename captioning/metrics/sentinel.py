"""Does the visual sentinel take the function words? The sentinel's weight (adaptive attention:
1 - the grid weights' sum, `models.attention.sentinel_weight`) per generated word, averaged by
word class on the built-in data. Numbers and words only: the caller computes the weights."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..data.synthetic import COLOURS, COLS, ROWS, SHAPES, SIZE_WORDS

# Words that name what is in the image: the attribute lexicon of the built-in captions.
VISUAL = (set(COLOURS) | set(SHAPES) | {w for ws in SIZE_WORDS.values() for w in ws}
          | set(ROWS) | set(COLS) | {"upper", "lower", "corner", "side"})
# Closed-class words with no visual referent (articles, prepositions, auxiliaries, conjunctions).
FUNCTION = {"a", "an", "the", "of", "in", "on", "at", "is", "there", "and", "with", "to", ",", ";",
            "one", "we", "its"}


def word_class(word: str) -> str:
    return "visual" if word in VISUAL else "function" if word in FUNCTION else "other"


def sentinel_by_word(captions: list[tuple[list[str], Sequence[float]]]) -> dict:
    """[(words, the sentinel's weight at each word (len(words),))] -> {"classes": {class: (mean
    sentinel weight, count)}, "words": {word: (mean, count)}}."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for words, weights in captions:
        for word, beta in zip(words, map(float, weights)):
            for key in (word_class(word), f"word:{word}"):
                sums[key][0] += beta
                sums[key][1] += 1
    mean = {k: (s / n, n) for k, (s, n) in sums.items()}
    return {"classes": {k: v for k, v in mean.items() if not k.startswith("word:")},
            "words": {k[5:]: v for k, v in mean.items() if k.startswith("word:")}}
