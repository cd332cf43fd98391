"""Self-critical training (training=scst): sampling, scoring, baseline, a learning signal, and
runs through train() for both decoders."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from captioning.data.vocab import Vocabulary
from captioning.lit.scst import SelfCritical, leave_one_out_mean
from captioning.models.attention import ATTENTIONS
from captioning.models.decoding import log_probs

WORDS = ["<pad>", "<bos>", "<eos>", "<unk>", "a", "red", "blue", "square", "circle", "small"]


def _model(decoder: str, tmp_path, attention: str = "additive"):
    from conftest import TINY, compose_cfg, shrink

    from captioning.models.captioner import build_captioner

    cfg = shrink(compose_cfg(TINY + [f"decoder={decoder}", f"attention={attention}"], tmp_path, tmp_path))
    torch.manual_seed(0)
    return build_captioner(OmegaConf.to_container(cfg, resolve=True), vocab_size=len(WORDS))


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_samples_are_k_per_image_eos_padded_and_never_banned(decoder, tmp_path):
    model = _model(decoder, tmp_path).eval()
    feats = torch.randn(3, 4, 512, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    samples = model.sample(feats, bos=1, eos=2, k=4, max_len=12, banned=(0, 1))
    assert samples.shape[0] == 12 and samples.shape[1] <= 12
    assert not torch.isin(samples, torch.tensor([0, 1])).any()
    for row in samples.tolist():
        if 2 in row:
            assert all(t == 2 for t in row[row.index(2):])  # eos-padded after the first eos
    torch.manual_seed(1)
    assert torch.equal(samples, model.sample(feats, bos=1, eos=2, k=4, max_len=12, banned=(0, 1)))
    assert len({tuple(r) for r in samples.tolist()}) > 3  # draws, not a copied argmax


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_the_teacher_forced_pass_scores_exactly_what_was_sampled(decoder, tmp_path):
    """The loss's log p(sample) (one teacher-forced pass) equals the sum of the step-by-step
    log-probabilities of the decoding that drew it."""
    model = _model(decoder, tmp_path).eval()
    feats = torch.randn(2, 4, 512, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(3)
    samples = model.sample(feats, 1, 2, k=3, max_len=8, banned=(0, 1))  # (6, L)
    rows = torch.arange(2).repeat_interleave(3)
    ended = samples == 2
    lengths = torch.where(ended.any(1), ended.int().argmax(1) + 1, samples.shape[1])
    inputs = torch.cat([torch.ones(6, 1, dtype=torch.long), samples[:, :-1]], 1)
    logits, _ = model(feats, inputs, lengths, rows)
    chosen = log_probs(logits, (0, 1)).gather(-1, samples[..., None])[..., 0]
    forced = [chosen[r, : lengths[r]].sum().item() for r in range(6)]
    decoder_ = model.decoder
    norm = model.normalizer(feats)
    for r in range(6):
        state = decoder_.init_state(decoder_.prepare(norm[rows[r : r + 1]]), norm[rows[r : r + 1]])
        token, total = torch.tensor([1]), 0.0
        for t in range(int(lengths[r])):
            step_logits, state, _ = decoder_.step(token, state)
            token = samples[r : r + 1, t]
            total += log_probs(step_logits, (0, 1))[0, token].item()
        assert forced[r] == pytest.approx(total, abs=1e-4)


def test_the_mean_baseline_is_the_other_samples_mean():
    reward = np.array([1.0, 2.0, 3.0, 0.0, 0.0, 6.0])  # K = 3: two images
    assert leave_one_out_mean(reward, 3).tolist() == [2.5, 2.0, 1.5, 3.0, 3.0, 0.0]


def _scst(baseline: str, k: int = 5) -> SelfCritical:
    vocab = Vocabulary(WORDS)
    refs = {0: [["a", "red", "square"], ["a", "small", "red", "square"]],
            1: [["a", "blue", "circle"], ["a", "small", "blue", "circle"]],
            2: [["a", "small", "square"]]}  # the df counts all training images
    return SelfCritical({"samples": k, "baseline": baseline, "max_len": 8}, vocab, refs)


def test_rewards_are_cider_d_with_training_document_frequencies():
    from captioning.metrics.cider import CiderD

    scst = _scst("mean")
    vocab = Vocabulary(WORDS)
    tokens = torch.tensor([vocab.encode(["a", "red", "square"])[1:] + [2],
                           vocab.encode(["a", "blue", "square"])[1:] + [2]])
    refs = [scst.refs[0], scst.refs[1]]
    got = scst.rewards(tokens, np.array([0, 1]), refs)
    fixed = CiderD(list(scst.refs.values()))
    want = fixed.score([["a", "red", "square"], ["a", "blue", "square"]], [0, 1], refs)
    assert np.allclose(got, want) and got[0] > got[1] > 0


def _sampled_rewards(model, scst: SelfCritical, feats: torch.Tensor, k: int = 64) -> np.ndarray:
    """CIDEr-D of k fresh samples per image from the model as it is (no update): an estimate
    of its expected reward, with its spread."""
    was_training = model.training
    model.eval()
    torch.manual_seed(11)
    v = scst.vocab
    samples = model.sample(feats, v.bos, v.eos, k, scst.max_len, scst.banned)
    rewards = scst.rewards(samples, np.repeat(np.arange(len(feats)), k), [scst.refs[0], scst.refs[1]])
    model.train(was_training)
    return np.asarray(rewards)


@pytest.mark.parametrize("baseline", ["mean", "greedy"])
@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_scst_raises_the_reward(decoder, baseline, tmp_path):
    """A few dozen policy-gradient steps on two images make their sampled captions score higher:
    the loss's gradient points where the reward is. Judged against the model's own start (its
    expected reward before any step, from 128 samples), by a margin of three standard errors
    of the difference: no threshold from one machine's numbers."""
    model = _model(decoder, tmp_path)
    scst = _scst(baseline, k=8)
    feats = torch.randn(2, 4, 512, generator=torch.Generator().manual_seed(4))
    index = torch.tensor([0, 1])
    before = _sampled_rewards(model, scst, feats)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(5)
    for _ in range(60):
        loss, stats = scst.loss(model, feats, index)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert np.isfinite(loss.item()) and stats["entropy"] > 0
    assert model.training  # the loss switches dropout off for its passes, then back
    after = _sampled_rewards(model, scst, feats)
    se = np.sqrt(before.var(ddof=1) / len(before) + after.var(ddof=1) / len(after))
    assert after.mean() - before.mean() > 3 * se, (before.mean(), after.mean(), se)


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
@pytest.mark.parametrize("attention", sorted(ATTENTIONS))
def test_one_scst_step_for_every_mode(decoder, attention, tmp_path):
    model = _model(decoder, tmp_path, attention)
    loss, stats = _scst("mean", k=3).loss(model, torch.randn(2, 4, 512), torch.tensor([0, 2]))
    loss.backward()
    grads = [p.grad for p in model.decoder.parameters() if p.grad is not None]
    assert np.isfinite(loss.item()) and any(g.abs().sum() > 0 for g in grads)
    assert set(stats) == {"reward", "baseline", "advantage", "advantage_abs", "entropy", "sample_len"}


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_scst_stage_through_train(decoder, tiny_cfg):
    """Cross-entropy first, then training=scst init_from its best.ckpt: the reward, baseline,
    advantage and entropy are logged, best.ckpt is chosen by val/cider."""
    from captioning.checkpoint import read_checkpoint
    from captioning.lit import train

    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    ce = tiny_cfg(f"decoder={decoder}", "trainer.max_epochs=1", "decode.beam_size=1")
    train(ce)
    first = Path(ce.paths.output_dir) / "checkpoints" / "best.ckpt"
    cfg = tiny_cfg(f"decoder={decoder}", "training=scst", f"init_from={first}", "trainer.max_epochs=1",
                   "trainer.limit_train_batches=4", "decode.beam_size=1", "logger=csv")
    cfg.paths.output_dir = str(Path(cfg.paths.output_dir).parent / "scst")
    results = train(cfg)
    assert "test/cider" in results and results["test/bleu4"] >= 0
    rows = list(csv.DictReader((Path(cfg.paths.output_dir) / "csv" / "metrics.csv").open()))
    for key in ("train/reward", "train/baseline", "train/advantage", "train/entropy"):
        assert any(r.get(key) for r in rows), key
    best = read_checkpoint(Path(cfg.paths.output_dir) / "checkpoints" / "best.ckpt")
    callbacks = best["callbacks"]
    assert any("val/cider" in k for k in callbacks)


def test_scst_without_init_from_is_refused(tiny_cfg):
    from captioning.lit.config_check import ConfigError, check_config

    cfg = tiny_cfg("training=scst", "optim.alpha_c=0.5")
    with pytest.raises(ConfigError, match="init_from") as err:
        check_config(OmegaConf.to_container(cfg, resolve=True))
    assert "optim.alpha_c=0.5 with training=scst" in str(err.value)
