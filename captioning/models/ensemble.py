"""Several trained captioners decoded as one: at every step the mean of their log-probabilities
(greedy, beam search and sampling unchanged: the ensemble is a decoder like any other)."""

from __future__ import annotations

import torch
from torch import nn

from .captioner import Captioner


class EnsembleDecoder(nn.Module):
    """The decoder API (prepare / init_state / step / reorder) over the members' own decoders.
    Each member sees the raw features through its own normaliser and refiner; its state is its
    own. The step's scores are mean_m log_softmax(logits_m): log-probabilities are valid logits,
    so greedy's argmax, beam search's normalisation and sampling's softmax read them as they
    read one model's. Attention: the members' mean (each member's rows sum to 1, so does it)."""

    def __init__(self, members: nn.ModuleList) -> None:
        super().__init__()
        self.members = members

    def prepare(self, raw: torch.Tensor, mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> list:
        # raw (B, N, C) -> per member (its prepared keys, its features (B, N, D_m))
        out = []
        for m in self.members:
            features = m.features(raw, mask)
            out.append((m.decoder.prepare(features, mask, positions), features))
        return out

    def init_state(self, prepared: list, raw: torch.Tensor) -> list:
        return [m.decoder.init_state(p, f) for m, (p, f) in zip(self.members, prepared)]

    def step(self, tokens: torch.Tensor, state: list) -> tuple[torch.Tensor, list, torch.Tensor]:
        scores, weights, new = 0.0, 0.0, []
        for m, s in zip(self.members, state):
            logits, s, w = m.decoder.step(tokens, s)  # (R, V), state, (R, N)
            scores = scores + logits.float().log_softmax(-1)
            weights = weights + w.float()
            new.append(s)
        k = len(self.members)
        return scores / k, new, weights / k

    def reorder(self, state: list, rows: torch.Tensor, images=None) -> list:
        return [m.decoder.reorder(s, rows, images) if images is not None else m.decoder.reorder(s, rows)
                for m, s in zip(self.members, state)]


class Ensemble(Captioner):
    """Captioner.generate / generate_nbest / sample over several models: raw features in, each
    member normalises them itself. Decoding only (no teacher-forced forward)."""

    def __init__(self, members: list[Captioner]) -> None:
        nn.Module.__init__(self)
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = nn.ModuleList(members)
        self.decoder = EnsembleDecoder(self.members)
        self.normalizer = self.refiner = self.encoder = None

    def features(self, raw_features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return raw_features  # each member's own normaliser runs in EnsembleDecoder.prepare

    def forward(self, *args, **kwargs):
        raise NotImplementedError("an Ensemble decodes (generate, generate_nbest, sample); train its members")
