"""captioning: image captioning with swappable cross-attention.

`from captioning import ImageCaptioner` (caption images in two calls: captioning/inference.py)
and `from captioning import load_checkpoint` work; the imports are lazy so that importing a
subpackage (e.g. the torch-only `captioning.models`) loads nothing else.
"""

__all__ = ["ImageCaption", "ImageCaptioner", "load_checkpoint"]


def __getattr__(name: str):
    if name == "load_checkpoint":
        from .checkpoint import load_checkpoint

        return load_checkpoint
    if name in ("ImageCaptioner", "ImageCaption"):
        from . import inference

        return getattr(inference, name)
    raise AttributeError(f"module 'captioning' has no attribute '{name}'")
