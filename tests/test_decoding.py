"""Decoding options against brute force on a tiny vocabulary: sampling (temperature, top-k,
top-p, seeded) draws from exactly the renormalised allowed set; beam search's n-best list is
exhaustive search's top n; a minimum length and n-gram blocking hold in greedy, beam and
sampling; the settings that contradict each other are refused by name."""

import math

import pytest
import torch

from captioning.models.beam import beam_search
from captioning.models.decoding import greedy_decode, sample_decode, sampling_distribution
from captioning.predict import decode_settings
from tests.test_beam import BOS, EOS, PAD, _decoder, all_scored


class FixedDecoder:
    """The decoder API with one fixed next-token distribution at every step: the sampler's
    draws can be counted against it."""

    def __init__(self, logits: torch.Tensor, keys: int = 3) -> None:
        self.logits, self.keys = logits, keys

    def prepare(self, features, mask=None, positions=None):
        return features

    def init_state(self, prepared, features):
        return torch.zeros(features.shape[0])

    def reorder(self, state, rows, images=None):
        return state[rows]

    def step(self, tokens, state):
        rows = tokens.shape[0]
        return self.logits.expand(rows, -1).clone(), state, torch.full((rows, self.keys), 1 / self.keys)


LOGITS = torch.tensor([0.0, 0.0, -1.0, 2.0, 1.5, 1.0, 0.5, -0.5])  # pad, bos, eos, five words


def _first_tokens(temperature=1.0, top_k=0, top_p=1.0, n=40_000, seed=0):
    dec = FixedDecoder(LOGITS)
    tokens, _ = sample_decode(dec, torch.zeros(1, 3, 4), BOS, EOS, n, max_len=1, banned=(PAD, BOS),
                              temperature=temperature, top_k=top_k, top_p=top_p,
                              generator=torch.Generator().manual_seed(seed))
    return torch.bincount(tokens[:, 0], minlength=len(LOGITS)).float() / n


def _allowed(temperature, top_k, top_p) -> torch.Tensor:
    """Brute force: the renormalised distribution over the allowed tokens, from the definition."""
    p = torch.softmax(LOGITS.index_fill(0, torch.tensor([PAD, BOS]), -math.inf) / temperature, 0)
    order = sorted(range(len(p)), key=lambda i: -p[i].item())
    keep = order[: top_k or len(p)]
    if top_p < 1.0:
        mass = p[keep] / p[keep].sum()
        kept, total = [], 0.0
        for i, q in zip(keep, mass.tolist()):
            if total >= top_p:
                break
            kept.append(i)
            total += q
        keep = kept
    out = torch.zeros_like(p)
    out[keep] = p[keep] / p[keep].sum()
    return out


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (1.0, 0, 1.0), (0.5, 0, 1.0), (2.0, 0, 1.0), (1.0, 3, 1.0), (1.0, 0, 0.7), (0.7, 4, 0.8)])
def test_sampling_draws_from_the_renormalised_allowed_set(temperature, top_k, top_p):
    want = _allowed(temperature, top_k, top_p)
    got = _first_tokens(temperature, top_k, top_p)
    assert torch.all(got[want == 0] == 0)  # never a token outside the set (nor pad, bos)
    n = 40_000
    sigma = (want * (1 - want) / n).sqrt()
    assert torch.all((got - want).abs() <= 5 * sigma + 1e-9), (got, want)
    assert torch.allclose(sampling_distribution(
        LOGITS.index_fill(0, torch.tensor([PAD, BOS]), -math.inf).unsqueeze(0), temperature, top_k, top_p)[0],
        want, atol=1e-6)


def test_sampling_is_seeded():
    assert torch.equal(_first_tokens(seed=3, n=500), _first_tokens(seed=3, n=500))
    assert not torch.equal(_first_tokens(seed=3, n=500), _first_tokens(seed=4, n=500))


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
@pytest.mark.parametrize("alpha", [0.0, 0.8])
def test_the_n_best_list_is_exhaustive_searchs_top_n(decoder, alpha):
    dec = _decoder(decoder)
    feats = torch.randn(1, 4, 6, generator=torch.Generator().manual_seed(1))
    want = all_scored(dec, feats, max_len=4, alpha=alpha)[:5]
    got = beam_search(dec, feats, BOS, EOS, beam_size=27, max_len=4, alpha=alpha, n_best=5,
                      banned=(PAD, BOS))[0]
    assert [h.tokens for h in got] == [seq for _, seq in want]
    assert [h.score for h in got] == pytest.approx([s for s, _ in want], abs=1e-4)


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_min_len_and_blocking_hold_in_every_path(decoder):
    dec = _decoder(decoder, vocab=12)
    with torch.no_grad():  # make <eos> the likeliest token everywhere: min_len must hold it off
        dec.head.bias[EOS] += 20.0
    feats = torch.randn(5, 4, 6, generator=torch.Generator().manual_seed(0))
    rules = {"banned": (PAD, BOS), "min_len": 4, "block_ngram": 1}  # no word twice

    def check(rows):
        for row in rows:
            words = row[: row.index(EOS)] if EOS in row else row
            assert len(words) >= 4 and len(set(words)) == len(words), row

    check(greedy_decode(dec, feats, BOS, EOS, max_len=8, **rules)[0].tolist())
    check(sample_decode(dec, feats, BOS, EOS, 3, max_len=8, generator=torch.Generator().manual_seed(0),
                        **rules)[0].tolist())
    check([h.tokens for hs in beam_search(dec, feats, BOS, EOS, beam_size=3, max_len=8, n_best=3, **rules)
           for h in hs])
    # Negative control: without min_len the likeliest first word is <eos>.
    assert greedy_decode(dec, feats, BOS, EOS, max_len=8, banned=(PAD, BOS))[0][:, 0].eq(EOS).all()


@pytest.mark.parametrize("settings, message", [
    ({"n_best": 3, "beam_size": 2}, r"decode\.n_best=3 needs decode\.beam_size >= 3"),
    ({"n_best": 2, "beam_size": 5, "sample": True}, r"decode\.n_best=2 with decode\.sample=true"),
    ({"min_len": 30, "max_len": 30}, r"decode\.min_len=30 must be below decode\.max_len=30"),
    ({"nucleus": 0.9}, r"unknown decode setting.*nucleus"),
])
def test_contradicting_decode_settings_are_refused_by_name(settings, message):
    base = {"beam_size": 1, "max_len": 30, "alpha": 0.0, "block_ngram": 0}
    with pytest.raises(ValueError, match=message):
        decode_settings(base, settings)


def test_a_checkpoint_from_before_the_options_decodes_as_before():
    """Older runs' decode blocks lack the new keys: they mean off."""
    merged = decode_settings({"beam_size": 5, "max_len": 30, "alpha": 1.0, "block_ngram": 0})
    assert merged["sample"] is False and merged["n_best"] == 1 and merged["min_len"] == 0


def test_training_tests_with_sampling_reproducibly(tiny_cfg, tmp_path):
    """decode.sample in the test stage: one seeded stream per pass, the same captions twice;
    validation stays greedy (its curve equals the search run's)."""
    import json

    from omegaconf import open_dict

    from captioning.lit import train

    results = []
    for name, extra in (("a", ["decode.sample=true", "decode.top_p=0.9"]),
                        ("b", ["decode.sample=true", "decode.top_p=0.9"]), ("greedy", [])):
        cfg = tiny_cfg("trainer.max_epochs=1", "decode.beam_size=1", *extra)
        with open_dict(cfg):
            cfg.paths.output_dir = str(tmp_path / name)
        results.append(train(cfg))
    assert results[0]["test/bleu4"] == results[1]["test/bleu4"]
    assert results[0]["val_curve"] == results[2]["val_curve"]
    preds = [json.loads((tmp_path / name / "predictions.json").read_text()) for name in ("a", "b", "greedy")]
    assert preds[0] == preds[1] and preds[0] != preds[2]


def _tiny_captioner(seed: int, vocab: int = 9):
    from captioning.models import Captioner, FeatureNormalizer, build_decoder

    torch.manual_seed(seed)
    dec = build_decoder({"name": "lstm", "embed_dim": 16, "hidden_dim": 16, "value_dim": 8}, vocab, 6,
                        {"name": "additive", "attn_dim": 8}).eval()
    with torch.no_grad():
        dec.head.weight.mul_(6)  # distinct, confident models
    norm = FeatureNormalizer(6, 6).set(torch.randn(6), torch.randn(6, 6))
    return Captioner(dec, norm).eval()


def test_an_ensemble_of_one_model_decodes_exactly_as_the_model():
    from captioning.models.ensemble import Ensemble

    model = _tiny_captioner(0)
    raw = torch.randn(4, 3, 6) * 3
    for settings in ({"beam_size": 1}, {"beam_size": 3, "alpha": 0.5}, {"beam_size": 1, "min_len": 2}):
        ids, weights = model.generate(raw, BOS, EOS, PAD, max_len=7, **settings)
        ids_e, weights_e = Ensemble([model]).generate(raw, BOS, EOS, PAD, max_len=7, **settings)
        assert ids_e == ids
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(weights, weights_e))


def test_an_ensemble_of_two_averages_log_probabilities_step_by_step():
    """Greedy decoding of the ensemble = by hand: each model steps on its own normalised
    features, the mean of the two log-softmaxes (pad and bos banned) picks the next word."""
    from captioning.models.ensemble import Ensemble

    a, b = _tiny_captioner(0), _tiny_captioner(1)
    raw = torch.randn(3, 3, 6) * 3
    got, _ = Ensemble([a, b]).generate(raw, BOS, EOS, PAD, max_len=6)
    with torch.no_grad():
        states, prev = [], torch.full((3,), BOS)
        for m in (a, b):
            f = m.features(raw)
            states.append(m.decoder.init_state(m.decoder.prepare(f), f))
        rows = [[] for _ in range(3)]
        for _ in range(6):
            mean = 0
            for k, m in enumerate((a, b)):
                logits, states[k], _ = m.decoder.step(prev, states[k])
                mean = mean + logits.log_softmax(-1) / 2
            mean[:, [PAD, BOS]] = -math.inf
            prev = mean.argmax(-1)
            for r in range(3):
                if not rows[r] or rows[r][-1] != EOS:
                    rows[r].append(int(prev[r]))
    assert got == rows
    alone = [a.generate(raw, BOS, EOS, PAD, max_len=6)[0], b.generate(raw, BOS, EOS, PAD, max_len=6)[0]]
    assert got not in alone  # the average is neither model (else the test shows nothing)
