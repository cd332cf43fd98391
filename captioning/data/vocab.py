"""Tokenizer and vocabulary. No downloaded data (nltk's punkt is not needed)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)

# Words (letters, digits, apostrophes inside words) or single punctuation marks.
_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*|[^\w\s]", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-case and split into words and punctuation marks."""
    return _TOKEN.findall(text.lower())


class Vocabulary:
    """Word <-> id mapping; ids 0..3 are the specials, <pad> is 0."""

    def __init__(self, words: Iterable[str]) -> None:
        self.itos: list[str] = list(words)
        if tuple(self.itos[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"vocabulary must start with {SPECIALS}, got {self.itos[:4]}")
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.pad, self.bos, self.eos, self.unk = (self.stoi[s] for s in SPECIALS)

    @classmethod
    def build(cls, captions: Iterable[list[str]], min_freq: int = 1) -> Vocabulary:
        """Words seen at least `min_freq` times, most frequent first (ties alphabetical)."""
        counts = Counter(w for tokens in captions for w in tokens)
        words = sorted((w for w, n in counts.items() if n >= min_freq and w not in SPECIALS),
                       key=lambda w: (-counts[w], w))
        return cls([*SPECIALS, *words])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        """<bos> tokens <eos> as ids; unknown words map to <unk>."""
        return [self.bos, *(self.stoi.get(w, self.unk) for w in tokens), self.eos]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Words up to the first <eos>, specials dropped."""
        ids = [int(i) for i in ids]
        return [self.itos[ids[t]] for t in self._kept(ids)]

    def decode_aligned(self, ids: list[int], weights):
        """(words, their rows of `weights`): row t of a decoder's weights belongs to token t of
        `ids`, so the rows of dropped specials must go too (slicing weights[:len(words)] is
        wrong as soon as a <pad> or <bos> was generated). weights (len(ids) or more, N)."""
        ids = [int(i) for i in ids]
        kept = self._kept(ids)
        return [self.itos[ids[t]] for t in kept], weights[kept]

    def _kept(self, ids: list[int]) -> list[int]:
        """Positions of real words: before the first <eos>, <pad> and <bos> dropped."""
        kept = []
        for t, i in enumerate(ids):
            if i == self.eos:
                break
            if i not in (self.pad, self.bos):
                kept.append(t)
        return kept
