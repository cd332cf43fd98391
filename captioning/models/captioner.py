"""The trainable model: raw encoder features in, normalised inside (per batch), decoded out.

Every entry point (`forward` for teacher forcing, `generate` for decoding) takes *raw* encoder
features, so a dataset's features are stored once, as the encoder wrote them, and the
normaliser that travels in the checkpoint is the only place normalisation happens.

Region features (encoder=precomputed) come padded to the batch's most regions: `mask` (B, N)
says which are real (padding gets exactly zero attention in every mode), `boxes` (B, N, 4)
their normalised (x1, y1, x2, y2), read by the position-aware modes as the boxes' centres.
"""

from __future__ import annotations

import torch
from torch import nn

from .beam import Hypothesis, beam_search
from .decoders import build_decoder
from .decoding import greedy_decode, sample_decode
from .encoder import TunableEncoder, build_tunable_encoder
from .encoder_specs import feature_dim, global_first
from .normalizer import FeatureNormalizer
from .refiner import build_refiner


class Captioner(nn.Module):
    """normaliser -> decoder; with encoder.finetune also the encoder whose last stages train
    (`encode`: images -> raw features), so every path captions with the network that trained."""

    def __init__(self, decoder: nn.Module, normalizer: FeatureNormalizer,
                 encoder: TunableEncoder | None = None, refiner: nn.Module | None = None) -> None:
        super().__init__()
        self.decoder = decoder
        self.normalizer = normalizer
        self.encoder = encoder  # None: features come from the (frozen) feature store
        self.refiner = refiner  # None: the decoder attends over the normalised features as they are

    def features(self, raw_features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Raw (B, N, C) -> what the decoder attends over: normalised, then refined (B, N, D)
        (the refiner's self-attention skips masked regions)."""
        features = self.normalizer(raw_features)
        return features if self.refiner is None else self.refiner(features, mask)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W) uint8 -> raw features (B, N, C) through the tuned encoder."""
        if self.encoder is None:
            raise ValueError("this model has no tuned encoder (encoder.finetune=false): its raw "
                             "features come from the frozen encoder (build_encoder(cfg['encoder']))")
        return self.encoder(images)

    def forward(
        self,
        raw_features: torch.Tensor,
        tokens: torch.Tensor,
        lengths: torch.Tensor | None = None,
        image_index: torch.Tensor | None = None,
        sample_prob: float = 0.0,
        mask: torch.Tensor | None = None,
        boxes: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: raw features (I, N, C), tokens (B, T) -> logits (B, T, V),
        weights (B, T, N); `image_index` (B,) maps captions to images; `sample_prob`: scheduled
        sampling (see the decoders); mask (I, N), boxes (I, N, 4): region features."""
        features = self.features(raw_features, mask)  # (I, N, D)
        kwargs = {"sample_prob": sample_prob} if sample_prob > 0 else {}
        kwargs.update(regions(mask, boxes))
        return self.decoder(features, tokens, lengths=lengths, image_index=image_index, **kwargs)

    @torch.no_grad()
    def generate(
        self,
        raw_features: torch.Tensor,
        bos: int,
        eos: int,
        pad: int,
        beam_size: int = 1,
        max_len: int = 30,
        alpha: float = 0.0,
        block_ngram: int = 0,
        min_len: int = 0,
        sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        n_best: int = 1,
        generator: torch.Generator | None = None,
        mask: torch.Tensor | None = None,
        boxes: torch.Tensor | None = None,
    ) -> tuple[list[list[int]], list[torch.Tensor]]:
        """Raw features (B, N, C) -> per image the token ids (without <bos>, up to and including
        <eos>) and their attention weights (len, N): sampled (sample=true: temperature, top_k,
        top_p; `generator`, else one seeded with `seed`), greedy (beam_size 1) or the best of a
        batched beam search (alpha: GNMT length penalty). The best caption only, whatever n_best
        (accepted so that a run's whole `decode` config can be passed): the list is
        generate_nbest's. Every path applies the same step rules: never <pad> or <bos>,
        block_ngram, min_len. mask (B, N), boxes (B, N, 4): region features."""
        features = self.features(raw_features, mask)  # (B, N, D)
        rules = {"banned": (pad, bos), "block_ngram": block_ngram, "min_len": min_len,
                 **regions(mask, boxes)}
        if sample or beam_size == 1:
            if sample:
                if generator is None:
                    generator = torch.Generator(features.device).manual_seed(seed)
                tokens, weights = sample_decode(self.decoder, features, bos, eos, 1, max_len,
                                                temperature=temperature, top_k=top_k, top_p=top_p,
                                                generator=generator, **rules)
            else:
                tokens, weights = greedy_decode(self.decoder, features, bos, eos, max_len, **rules)
            ids, out = [], []
            # One host copy for the whole batch: the cut at <eos> is Python list work.
            for row, w in zip(tokens.tolist(), weights):
                n = row.index(eos) + 1 if eos in row else len(row)
                ids.append(row[:n])
                out.append(w[:n])
            return ids, out
        hyps = self.generate_nbest(raw_features, bos, eos, pad, beam_size, max_len, alpha, 1,
                                   block_ngram=block_ngram, min_len=min_len, mask=mask, boxes=boxes)
        return [h[0].tokens for h in hyps], [h[0].weights for h in hyps]

    @torch.no_grad()
    def generate_nbest(self, raw_features: torch.Tensor, bos: int, eos: int, pad: int,
                       beam_size: int = 5, max_len: int = 30, alpha: float = 0.0, n_best: int = 1,
                       block_ngram: int = 0, min_len: int = 0, mask: torch.Tensor | None = None,
                       boxes: torch.Tensor | None = None) -> list[list[Hypothesis]]:
        """Raw features (B, N, C) -> per image beam search's n_best hypotheses, best first
        (tokens, length-penalised score, log-probability, attention)."""
        return beam_search(self.decoder, self.features(raw_features, mask), bos, eos, beam_size,
                           max_len, alpha=alpha, block_ngram=block_ngram, n_best=n_best,
                           banned=(pad, bos), min_len=min_len, **regions(mask, boxes))

    @torch.no_grad()
    def sample(self, raw_features: torch.Tensor, bos: int, eos: int, k: int, max_len: int = 30,
               banned: tuple[int, ...] = (), mask: torch.Tensor | None = None,
               boxes: torch.Tensor | None = None) -> torch.Tensor:
        """Raw features (B, N, C) -> (B*K, L) token ids, K sampled captions per image
        (image-major, eos-padded; decoding.sample_decode). Self-critical training draws these."""
        return sample_decode(self.decoder, self.features(raw_features, mask), bos, eos, k, max_len,
                             banned, **regions(mask, boxes))[0]


def regions(mask: torch.Tensor | None, boxes: torch.Tensor | None) -> dict:
    """The decoders' keywords for region features: the mask (B, N) and, from boxes (B, N, 4)
    (x1, y1, x2, y2 in [0, 1]), each region's centre (row, col) = (B, N, 2); {} for a grid."""
    out = {} if mask is None else {"mask": mask}
    if boxes is not None:
        out["positions"] = torch.stack([(boxes[..., 1] + boxes[..., 3]) / 2,
                                        (boxes[..., 0] + boxes[..., 2]) / 2], -1)  # (B, N, 2)
    return out


def build_captioner(cfg: dict, vocab_size: int) -> Captioner:
    """The model a resolved run config describes (normaliser statistics still to be loaded)."""
    enc = cfg["encoder"]
    in_dim = feature_dim(enc)
    normalizer = FeatureNormalizer(in_dim, enc["pca_dim"] or in_dim, cfg["data"]["blind"])
    decoder = build_decoder(cfg["decoder"], vocab_size, normalizer.out_dim, cfg["attention"],
                            global_first=global_first(enc))
    encoder = build_tunable_encoder(enc) if enc["finetune"] else None
    return Captioner(decoder, normalizer, encoder, build_refiner(cfg["model"], normalizer.out_dim))


def resolved_attention(cfg: dict) -> str:
    """What `attention=<name>` runs as for this config: `mixed` decides at construction (from
    the widths the decoder gives it), every other mode is itself. The model is built on the
    meta device, so asking costs no memory and no initialisation."""
    with torch.device("meta"):
        model = build_captioner(cfg, vocab_size=8)
    return attention_choice(model, cfg["attention"]["name"])


def attention_choice(model: Captioner, name: str) -> str:
    """The attention mode a built model of `attention=name` runs: `mixed` records what it chose
    at construction, every other mode is itself."""
    return getattr(model.decoder.attention, "choice", name)
