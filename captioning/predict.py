"""From raw features to words: the one decode path that training (validation/test), evaluation
and captioning new images share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .checkpoint import load_ensemble
from .data.vocab import Vocabulary
from .device import resolve_device
from .models.captioner import Captioner
from .models.cpu_speed import configure_cpu
from .schema.fields import defaults
from .schema.run import Decode

# Every decode setting with its default (schema.run.Decode): what a checkpoint saved before a
# setting existed gets for it.
DECODE_DEFAULTS = defaults(Decode)


def greedy(decode: dict) -> dict:
    """The decode settings with beam search and sampling switched off: validation decodes
    greedily every epoch because it only ranks checkpoints (the same rules: min_len,
    block_ngram); the test stage uses the settings as given."""
    return {**decode, "beam_size": 1, "sample": False, "n_best": 1}


def decode_settings(base: dict, overrides: dict | None = None) -> dict:
    """A run's `decode` config with the non-None entries of `overrides` applied (settings a
    checkpoint from before them lacks take their defaults: off)."""
    merged = {**DECODE_DEFAULTS, **base, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    unknown = set(merged) - set(DECODE_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown decode setting(s) {sorted(unknown)}; valid: {', '.join(DECODE_DEFAULTS)}")
    if problems := decode_problems(merged):
        raise ValueError("; ".join(problems))
    return merged


def decode_problems(decode: dict) -> list[str]:
    """The decode settings (all of them: decode_settings) that contradict each other (each
    key's own range: the schema)."""
    problems = []
    n_best, beam = decode["n_best"], decode["beam_size"]
    if n_best > 1 and decode["sample"]:
        problems.append(f"decode.n_best={n_best} with decode.sample=true: n-best lists come from "
                        "beam search; set decode.sample=false or decode.n_best=1")
    elif n_best > beam >= 1:  # (a beam_size below 1 is reported by its own rule)
        problems.append(f"decode.n_best={n_best} needs decode.beam_size >= {n_best} (it is {beam})")
    if decode["min_len"] >= decode["max_len"]:
        problems.append(f"decode.min_len={decode['min_len']} must be below decode.max_len="
                        f"{decode['max_len']}")
    return problems


@dataclass
class Caption:
    """One image's caption: its words, and the attention behind them."""

    words: list[str]
    weights: torch.Tensor  # (len(words), N): row t is the attention when word t was generated
    steps: torch.Tensor  # (steps, N): every decoding step up to and including <eos> (diagnostics)
    # decode.n_best > 1: beam search's n best, best first: {caption, score, logprob}
    nbest: list[dict] | None = None


@torch.no_grad()
def caption_features(
    model: Captioner, vocab: Vocabulary, raw_features: torch.Tensor, decode: dict,
    generator: torch.Generator | None = None, regions: dict | None = None,
) -> list[Caption]:
    """Raw features (B, N, C), on any device -> one Caption per image, decoded on the model's
    device with `decode` settings (the attention stays there); `generator`: the sampling draws
    (decode.sample), one per decoding pass so that its batches continue one seeded stream;
    `regions`: mask (B, N) and boxes (B, N, 4) of region features."""
    device = next(model.parameters()).device
    raw = raw_features.to(device)
    regions = {k: v.to(device) for k, v in (regions or {}).items()}
    settings = {k: v for k, v in decode.items() if k != "n_best"}
    if decode["n_best"] == 1:
        ids, weights = model.generate(raw, vocab.bos, vocab.eos, vocab.pad, generator=generator,
                                      **settings, **regions)
        return [Caption(*vocab.decode_aligned(tokens, w), w) for tokens, w in zip(ids, weights)]
    hyps = model.generate_nbest(raw, vocab.bos, vocab.eos, vocab.pad, decode["beam_size"],
                                decode["max_len"], decode["alpha"], decode["n_best"],
                                decode["block_ngram"], decode["min_len"], **regions)
    return [Caption(*vocab.decode_aligned(h[0].tokens, h[0].weights), h[0].weights,
                    [{"caption": " ".join(vocab.decode(x.tokens)), "score": x.score, "logprob": x.logprob}
                     for x in h]) for h in hyps]


def decode_generator(decode: dict, device: torch.device) -> torch.Generator | None:
    """The seeded generator of one decoding pass when decode.sample is on, else None."""
    return torch.Generator(device).manual_seed(int(decode["seed"])) if decode["sample"] else None


@dataclass
class Predictor:
    """A checkpoint ready to caption: model (eval mode, on `device`), vocabulary, run config,
    decoding."""

    model: Captioner
    vocab: Vocabulary
    cfg: dict
    decode: dict
    device: torch.device

    @classmethod
    def load(cls, checkpoint: str | Path | list, decode: dict | None = None,
             device: str = "auto") -> Predictor:
        """`checkpoint`: one file, or several (an ensemble: their per-step log-probabilities
        averaged; the first one's decode settings); `decode` entries that are not None override
        the checkpoint's own settings; `device`: auto (the GPU when there is one, as training),
        cpu, cuda or cuda:N."""
        where = resolve_device(device)  # a bad name fails before the checkpoint is read
        configure_cpu()  # decoding a trained model is full of them too
        paths = [checkpoint] if isinstance(checkpoint, (str, Path)) else list(checkpoint)
        model, vocab, cfg = load_ensemble(paths)
        return cls(model.to(where), vocab, cfg, decode_settings(cfg["decode"], decode), where)

    def __post_init__(self) -> None:
        self.generator = decode_generator(self.decode, self.device)  # one stream per Predictor

    def __call__(self, raw_features: torch.Tensor, regions: dict | None = None) -> list[Caption]:
        """Captions with their attention on the CPU (figures, JSON), wherever they were decoded;
        `regions`: mask and boxes of region features (PreparedData.batch_features). Decoded in
        the precision the run was tested in (bf16 autocast after bf16-mixed training), as its
        test stage did."""
        bf16 = str(self.cfg["trainer"]["precision"]).startswith("bf16")
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
            captions = caption_features(self.model, self.vocab, raw_features, self.decode,
                                        self.generator, regions)
        return [Caption(c.words, c.weights.cpu(), c.steps.cpu(), c.nbest) for c in captions]
