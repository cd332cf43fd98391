"""The gallery: several runs' test captions, scores and per-word attention side by side, as a
self-contained folder (index.html + files) that opens from disk (scripts/gallery.py)."""

from .build import build_gallery, differing_config

__all__ = ["build_gallery", "differing_config"]
