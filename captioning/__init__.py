"""captioning: image captioning with swappable cross-attention."""

from .checkpoint import load_checkpoint

__all__ = ["load_checkpoint"]
