"""Text metrics: they score words and know no model."""

from .attributes import attribute_accuracy, parse_attributes
from .bleu import corpus_bleu_scores

__all__ = ["attribute_accuracy", "corpus_bleu_scores", "parse_attributes"]
