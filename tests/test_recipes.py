"""Training recipes: each option does what it says."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from captioning.lit.module import CaptioningModule
from captioning.models.attention import doubly_stochastic_penalty


def test_doubly_stochastic_penalty_by_hand():
    weights = torch.tensor([[[0.5, 0.5], [0.9, 0.1], [0.3, 0.7]]])  # (B=1, T=3, N=2)
    valid = torch.tensor([[True, True, False]])  # the last step is padding
    # coverage = (0.5 + 0.9, 0.5 + 0.1) = (1.4, 0.6); (1 - 1.4)^2 + (1 - 0.6)^2 = 0.16 + 0.16
    assert doubly_stochastic_penalty(weights, valid).item() == pytest.approx(0.32)
    two = torch.cat([weights, torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])])
    both = doubly_stochastic_penalty(two, torch.tensor([[True, True, False], [True, True, True]]))
    assert both.item() == pytest.approx((0.32 + 0.0) / 2)  # the mean over captions


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_alpha_c_adds_exactly_its_term_to_the_loss(decoder, tmp_path):
    from conftest import TINY, compose_cfg, shrink

    def module(alpha_c: float) -> CaptioningModule:
        overrides = TINY + [f"decoder={decoder}", f"optim.alpha_c={alpha_c}"]
        cfg = OmegaConf.to_container(shrink(compose_cfg(overrides, tmp_path, tmp_path)), resolve=True)
        torch.manual_seed(0)
        m = CaptioningModule(cfg, ["<pad>", "<bos>", "<eos>", "<unk>", "a", "red", "square"])
        return m.eval()  # no dropout: the two losses differ by the term only

    g = torch.Generator().manual_seed(1)
    tokens = torch.tensor([[1, 4, 5, 6, 2], [1, 4, 6, 2, 0], [1, 5, 2, 0, 0]])  # padded with 0
    batch = {"index": torch.arange(2), "features": torch.randn(2, 4, 512, generator=g),
             "tokens": tokens, "image_index": torch.tensor([0, 0, 1])}
    plain, regularised = module(0.0), module(0.5)
    warnings.filterwarnings("ignore", message=".*self.log.*")  # no trainer here: logging is a no-op
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), regularised.parameters()))
    base = plain.training_step(batch, 0)
    with_term = regularised.training_step(batch, 0)
    targets = tokens[:, 1:]
    _, weights = plain.model(batch["features"], tokens[:, :-1], (targets != 0).sum(1), batch["image_index"])
    by_hand = 0.0
    for b in range(3):
        steps = int((targets[b] != 0).sum())
        by_hand += ((1 - weights[b, :steps].sum(0)) ** 2).sum().item()
    assert (with_term - base).item() == pytest.approx(0.5 * by_hand / 3, rel=1e-5)


def test_alpha_c_is_refused_where_weights_are_diagnostic(tmp_path):
    from conftest import TINY, compose_cfg

    from captioning.lit.config_check import ConfigError, check_config

    cfg = compose_cfg(TINY + ["attention=linear", "optim.alpha_c=1.0"], tmp_path, tmp_path)
    with pytest.raises(ConfigError, match="diagnostics only"):
        check_config(OmegaConf.to_container(cfg, resolve=True))


def test_early_stopping_stops_when_the_monitor_stalls(tiny_cfg):
    """lr ~0: validation never improves after the first epoch; patience 1 stops after epoch 2."""
    from pathlib import Path

    from captioning.checkpoint import read_checkpoint
    from captioning.lit import train

    cfg = tiny_cfg("optim.optimizer.lr=1e-12", "trainer.max_epochs=6", "early_stopping.patience=1",
                   "decode.beam_size=1", "logger=none")
    train(cfg)
    last = read_checkpoint(Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt")
    assert last["epoch"] == 1  # epochs 0 and 1 ran, 2..5 did not


def _tiny_decoder(decoder: str, tmp_path):
    from conftest import TINY, compose_cfg, shrink

    from captioning.models.captioner import build_captioner

    cfg = shrink(compose_cfg(TINY + [f"decoder={decoder}"], tmp_path, tmp_path))
    torch.manual_seed(0)
    return build_captioner(OmegaConf.to_container(cfg, resolve=True), vocab_size=12).eval()  # no dropout


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_scheduled_sampling_at_0_is_teacher_forcing_and_at_1_feeds_predictions(decoder, tmp_path):
    model = _tiny_decoder(decoder, tmp_path)
    g = torch.Generator().manual_seed(3)
    feats = torch.randn(2, 4, 512, generator=g)
    tokens = torch.randint(3, 12, (3, 6), generator=g)
    tokens[:, 0] = 1
    lengths, index = torch.tensor([6, 6, 6]), torch.tensor([0, 1, 1])
    forced, _ = model(feats, tokens, lengths, index)
    zero, _ = model(feats, tokens, lengths, index, sample_prob=0.0)
    assert torch.equal(zero, forced)
    torch.manual_seed(0)
    own, _ = model(feats, tokens, lengths, index, sample_prob=1.0)
    # p = 1: every input after <bos> is a prediction. The LSTM feeds its own previous output
    # step by step; the Transformer (two passes) the teacher-forced pass's predictions.
    source = own if decoder == "lstm" else forced
    fed = torch.cat([tokens[:, :1], source[:, :-1].argmax(-1)], 1)
    again, _ = model(feats, fed, lengths, index)  # teacher forcing on exactly those inputs
    assert torch.allclose(own, again, atol=1e-5)
    assert not torch.equal(fed, tokens)


def test_the_sampling_probability_ramps():
    from captioning.lit.module import sample_prob

    ramp = {"max_prob": 0.3, "start_epoch": 2, "ramp_epochs": 3}
    assert [round(sample_prob(ramp, e), 3) for e in range(7)] == [0, 0, 0.1, 0.2, 0.3, 0.3, 0.3]
    assert sample_prob({"max_prob": 0.0}, 5) == 0.0


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_a_run_with_the_recipes_on(decoder, tiny_cfg):
    """alpha_c and scheduled sampling through train(), both decoders: the terms are logged."""
    import csv
    from pathlib import Path

    from captioning.lit import train

    cfg = tiny_cfg(f"decoder={decoder}", "optim.alpha_c=1.0", "model.scheduled_sampling.max_prob=0.5",
                   "trainer.max_epochs=1", "decode.beam_size=1", "logger=csv", "trainer.log_every_n_steps=1")
    results = train(cfg)
    assert 0 <= results["test/bleu4"] <= 1
    rows = list(csv.DictReader((Path(cfg.paths.output_dir) / "csv" / "metrics.csv").open()))
    assert any(r.get("train/sample_prob") == "0.5" for r in rows)
    assert any(r.get("train/attn_coverage_penalty") for r in rows)


def test_warmup_cosine_shape():
    from captioning.lit.schedules import warmup_cosine

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = warmup_cosine(opt, total_steps=100, warmup_pct=0.1, min_lr_ratio=0.1)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # linear warm-up
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))  # then never rises
    assert lrs[-1] == pytest.approx(0.1)  # down to min_lr_ratio at the last step


@pytest.mark.parametrize("schedule", ["warmup_cosine", "plateau", "constant"])
def test_schedule_presets_train(schedule, tiny_cfg):
    from pathlib import Path

    from captioning.checkpoint import read_checkpoint
    from captioning.lit import train

    cfg = tiny_cfg(f"schedule={schedule}", "trainer.max_epochs=2", "decode.beam_size=1", "logger=none")
    train(cfg)
    last = read_checkpoint(Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt")
    kinds = {"warmup_cosine": "lr_lambdas", "plateau": "num_bad_epochs"}
    if schedule == "constant":
        assert last["lr_schedulers"] == []
    else:
        assert kinds[schedule] in last["lr_schedulers"][0]



EXPERIMENTS = Path(__file__).resolve().parents[1] / "conf" / "experiment"


@pytest.mark.parametrize("preset", sorted(p.stem for p in EXPERIMENTS.glob("*.yaml")))
def test_every_experiment_preset_is_a_valid_config(preset, tmp_path):
    """Each preset composes and every key and value in it passes the config check (the files it
    names, COCO's or init_from's, are the user's to supply). Presets for data not on this
    machine say that they are not measured."""
    from conftest import compose_cfg

    from captioning.lit.config_check import bad_values, schema_problems

    cfg = OmegaConf.to_container(compose_cfg([f"experiment={preset}"], tmp_path, tmp_path), resolve=True)
    problems = schema_problems(cfg) + [p for p in bad_values(cfg) if "needs init_from" not in p]
    assert problems == []
    if cfg["data"]["name"] != "synthetic":
        assert "NOT MEASURED HERE" in (EXPERIMENTS / f"{preset}.yaml").read_text()
