"""Models: torch/torchvision only (no Lightning, Hydra, wandb or nltk) so they run anywhere."""

from .attention import ATTENTIONS, build_attention
from .beam import Hypothesis, beam_search
from .captioner import (
    DECODERS,
    Captioner,
    FeatureNormalizer,
    build_captioner,
    build_decoder,
    fit_normalizer,
)
from .decoding import greedy_decode
from .encoder import ENCODERS, ResNetEncoder, encoder_dim

__all__ = [
    "ATTENTIONS", "DECODERS", "ENCODERS", "Captioner", "FeatureNormalizer", "Hypothesis",
    "ResNetEncoder", "beam_search", "build_attention", "build_captioner", "build_decoder",
    "encoder_dim", "fit_normalizer", "greedy_decode",
]
