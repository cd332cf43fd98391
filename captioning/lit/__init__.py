"""The only place that imports pytorch_lightning."""

from .datamodule import CaptionDataModule
from .module import CaptioningModule

__all__ = ["CaptionDataModule", "CaptioningModule"]
