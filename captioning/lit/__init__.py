"""The only package that imports pytorch_lightning: the LightningModule, the DataModule, the
callbacks and loggers, and train(cfg), the whole run."""

from .datamodule import CaptionDataModule
from .module import CaptioningModule
from .training import train

__all__ = ["CaptionDataModule", "CaptioningModule", "train"]
