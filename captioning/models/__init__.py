"""Models: torch/torchvision only (no Lightning, Hydra, wandb or nltk) so they run anywhere."""

from .attention import ATTENTIONS, build_attention
from .beam import Hypothesis, beam_search
from .captioner import Captioner, build_captioner, resolved_attention
from .decoders import DECODERS, build_decoder
from .decoding import greedy_decode
from .encoder import ResNetEncoder, build_encoder
from .encoder_specs import ENCODERS, encoder_dim, feature_dim
from .normalizer import FeatureNormalizer, fit_normalizer

__all__ = [
    "ATTENTIONS", "DECODERS", "ENCODERS", "Captioner", "FeatureNormalizer", "Hypothesis",
    "ResNetEncoder", "beam_search", "build_attention", "build_captioner", "build_decoder",
    "build_encoder", "encoder_dim", "feature_dim", "fit_normalizer", "greedy_decode", "resolved_attention",
]
