"""captioning: image captioning with swappable cross-attention.

`from captioning import load_checkpoint` works; the import is lazy so that importing a
subpackage (e.g. the torch-only `captioning.models`) loads nothing else.
"""

__all__ = ["load_checkpoint"]


def __getattr__(name: str):
    if name == "load_checkpoint":
        from .checkpoint import load_checkpoint

        return load_checkpoint
    raise AttributeError(f"module 'captioning' has no attribute '{name}'")
