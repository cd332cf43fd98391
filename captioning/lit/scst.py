"""Self-critical sequence training (Rennie et al. 2017): REINFORCE on sampled captions, reward
CIDEr-D against the image's references, minus a baseline so only better-than-usual captions are
reinforced (`training=scst`, README "Training recipes").

One step: K captions per image are sampled (multinomial, no gradient), then scored with gradient
in one teacher-forced pass over the samples (the decoders' fast training path, both decoders,
every attention mode). Dropout is off in both passes, so the log-probabilities are those of the
policy that drew the samples, which is also the policy decoding uses.
"""

from __future__ import annotations

import numpy as np
import torch

from ..data.vocab import Vocabulary
from ..metrics.cider import CiderD
from ..models.captioner import Captioner
from ..models.decoding import log_probs

BASELINES = ("mean", "greedy")


class SelfCritical:
    """settings: the `training` config (samples K, baseline, max_len). train_refs: record index
    -> that training image's reference token lists; CIDEr-D's document frequencies come from
    all of them, counted once (a sample's reward must not depend on its batch-mates)."""

    def __init__(self, settings: dict, vocab: Vocabulary, train_refs: dict[int, list[list[str]]]) -> None:
        self.k, self.baseline = int(settings["samples"]), settings["baseline"]
        self.max_len = int(settings["max_len"])
        if self.baseline not in BASELINES:
            raise ValueError(f"training.baseline={self.baseline!r}: known baselines are {list(BASELINES)}")
        self.vocab, self.refs = vocab, train_refs
        self.cider = CiderD(list(train_refs.values()))
        self.banned = (vocab.pad, vocab.bos)  # never sampled (beam search bans them too)

    def rewards(self, tokens: torch.Tensor | list[list[int]], image: np.ndarray, refs: list) -> np.ndarray:
        """(H, L) token ids (or H id lists), hypothesis h describing refs[image[h]] -> (H,) CIDEr-D."""
        # Host copy on purpose: CIDEr-D is n-gram counting over words.
        rows = tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens
        return self.cider.score([self.vocab.decode(row) for row in rows], image, refs)

    def loss(self, model: Captioner, raw: torch.Tensor, index: torch.Tensor,
             regions: dict | None = None) -> tuple[torch.Tensor, dict]:
        """raw features (B, N, C) of training records `index` (B,) -> the policy-gradient loss
        and the step's statistics (reward, baseline, advantage, entropy, length). `regions`:
        mask (B, N) and boxes (B, N, 4) of region features."""
        regions = regions or {}
        b, k, v = raw.shape[0], self.k, self.vocab
        refs = [self.refs[i] for i in index.tolist()]  # host copy: the keys of a Python dict
        was_training = model.training
        model.eval()  # dropout off: score exactly the policy that samples
        try:
            samples = model.sample(raw.detach(), v.bos, v.eos, k, self.max_len, self.banned,
                                   **regions)  # (B*K, L)
            reward = self.rewards(samples, np.repeat(np.arange(b), k), refs)  # (B*K,)
            if self.baseline == "mean":  # the other K-1 samples of the same image: no extra decode
                base = leave_one_out_mean(reward, k)
            else:  # greedy: the test-time decoder's own caption (one more decode per image)
                ids, _ = model.generate(raw.detach(), v.bos, v.eos, v.pad, 1, self.max_len, **regions)
                base = np.repeat(self.rewards(ids, np.arange(b), refs), k)
            # The samples' log-probabilities, with gradient: one teacher-forced pass.
            rows = torch.arange(b, device=raw.device).repeat_interleave(k)  # (B*K,) image per sample
            ended = samples == v.eos
            lengths = torch.where(ended.any(1), ended.int().argmax(1) + 1, samples.shape[1])  # eos included
            inputs = torch.cat([samples.new_full((len(rows), 1), v.bos), samples[:, :-1]], 1)  # (B*K, L)
            logits, _ = model(raw, inputs, lengths, rows, **regions)  # (B*K, L, V)
        finally:
            model.train(was_training)
        logp = log_probs(logits, self.banned)  # (B*K, L, V)
        valid = torch.arange(samples.shape[1], device=raw.device) < lengths[:, None]  # (B*K, L)
        chosen = logp.gather(-1, samples.unsqueeze(-1)).squeeze(-1)  # (B*K, L)
        advantage = torch.as_tensor(reward - base, dtype=torch.float32, device=raw.device)  # (B*K,)
        # REINFORCE: -A * log p(caption), averaged over the samples' tokens.
        loss = -(advantage[:, None] * chosen * valid).sum() / valid.sum()
        with torch.no_grad():
            p = logp.exp()
            entropy = -(p * logp.masked_fill(p == 0, 0)).sum(-1)  # (B*K, L) nats per step
            gap = reward - base
            stats = {
                "reward": float(reward.mean()), "baseline": float(base.mean()),
                "advantage": float(gap.mean()), "advantage_abs": float(np.abs(gap).mean()),
                "entropy": float(entropy[valid].mean()), "sample_len": float(lengths.float().mean()),
            }
        return loss, stats


def leave_one_out_mean(reward: np.ndarray, k: int) -> np.ndarray:
    """(B*K,) rewards, K per image (image-major) -> (B*K,) each sample's baseline: the mean of
    its image's other K-1 rewards (independent of the sample itself, so the gradient stays
    unbiased)."""
    per_image = reward.reshape(-1, k)  # (B, K)
    return ((per_image.sum(1, keepdims=True) - per_image) / (k - 1)).reshape(-1)


def training_references(data) -> dict[int, list[list[str]]]:
    """record index -> reference token lists, for every training image of a PreparedData."""
    return {i: data.records[i].captions for i in data.split_indices("train")}
