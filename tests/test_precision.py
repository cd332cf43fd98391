"""The CPU precision is chosen by measuring, once per machine, and cached: reused without a
second timing, overridden by config, fp32 where bf16 does not run or is not faster."""

from __future__ import annotations

import json

import pytest
import torch

from captioning.models import precision_choice as precision

REAL_MEASURE = precision.measure


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPTIONING_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precision, "_MEMO", {})
    return tmp_path / "precision.json"


def _fake(bf16_ratio: float):
    calls = []

    def measure():
        calls.append(1)
        return {k: {"fp32_s": 1.0, "bf16_s": bf16_ratio, "fp32_tflops": 0.1,
                    "choice": "bf16" if bf16_ratio <= precision.MARGIN else "fp32"} for k in precision.KINDS}
    return measure, calls


def _without_bf16(make_run):
    """A run-maker like `make_run` whose runs fail in bf16, as on a CPU without bf16 kernels."""
    def make(*args):
        run = make_run(*args)

        def guarded(dtype):
            if dtype == torch.bfloat16:
                raise RuntimeError("no bf16 kernel")
            return run(dtype)
        return guarded
    return make


def test_the_two_precisions_alternate_after_a_warm_up_each():
    order = []
    result = precision._race(order.append, 3)
    fp32, bf16 = torch.float32, torch.bfloat16
    assert order == [fp32, bf16] * 4  # a first call each (the warm-up), then 3 timed each
    assert set(result) == {"fp32_s", "bf16_s", "choice"}


def test_a_far_slower_bf16_is_timed_no_further_than_its_first_call(monkeypatch):
    """A CPU that emulates bf16 (AVX2: 7-50x slower) is not made to run it 5 more times."""
    order, now = [], [0.0]
    cost = {torch.float32: 0.05, torch.bfloat16: 0.05 * (precision.CUT_SHORT + 1)}

    def run(dtype):  # a simulated clock: each call costs its precision's time
        order.append(dtype)
        now[0] += cost[dtype]
    monkeypatch.setattr(precision.time, "perf_counter", lambda: now[0])
    result = precision._race(run, 5, warmup=6)
    assert order == [torch.float32, torch.bfloat16]  # one call each, not 6 + 5
    assert result["choice"] == "fp32" and result["cut_short"]
    assert result["bf16_s"] == pytest.approx(cost[torch.bfloat16])


def test_measured_once_cached_and_reused(cache, monkeypatch, caplog):
    measure, calls = _fake(0.3)
    monkeypatch.setattr(precision, "measure", measure)
    with caplog.at_level("INFO", logger="captioning"):
        assert precision.calibrated_dtype("encoder") == torch.bfloat16
    assert calls == [1] and precision.machine() in json.loads(cache.read_text())
    line = [r.getMessage() for r in caplog.records if r.getMessage().startswith("precision: measured")]
    assert len(line) == 1 and "encoder fp32 1000.0 ms, bf16 300.0 ms -> bf16" in line[0]
    monkeypatch.setattr(precision, "_MEMO", {})  # another process: reads the file, no timing
    assert precision.calibrated_dtype("decoder") == torch.bfloat16 and calls == [1]


def test_not_faster_enough_or_not_running_means_fp32(cache, monkeypatch):
    measure, _ = _fake(0.95)  # within the margin: fp32's exactness wins
    monkeypatch.setattr(precision, "measure", measure)
    assert precision.calibrated_dtype("encoder") == torch.float32
    monkeypatch.setattr(precision, "_MEMO", {})
    cache.unlink()
    monkeypatch.setattr(precision, "_inference", _without_bf16(precision._inference))
    result = precision.calibration(REAL_MEASURE)
    assert all(r["choice"] == "fp32" and r["bf16_s"] is None for r in result.values())


def test_config_overrides_the_measurement(cache, monkeypatch):
    from captioning.models.encoder import autocast_dtype

    def never():
        raise AssertionError("a forced precision must not be measured")

    monkeypatch.setattr(precision, "measure", never)
    cpu = torch.device("cpu")
    assert autocast_dtype(cpu, "fp32") == torch.float32 and autocast_dtype(cpu, "bf16") == torch.bfloat16


def test_the_real_measurement_runs(cache):
    result = precision.measure()
    assert set(result) == set(precision.KINDS)
    for r in result.values():
        assert r["fp32_s"] > 0 and r["choice"] in ("fp32", "bf16")
        faster = r["bf16_s"] is not None and r["bf16_s"] <= precision.MARGIN * r["fp32_s"]
        assert (r["choice"] == "bf16") == faster


# --- trainer.precision=auto: a training step of the run's own model, measured here -------------

def _tiny_run(tiny_cfg, *overrides):
    """A composed tiny config, its data module and module (what train() builds before the Trainer)."""
    from captioning.lit.datamodule import CaptionDataModule
    from captioning.lit.module import CaptioningModule
    from captioning.lit.training import _plain

    plain = _plain(tiny_cfg(*overrides))
    data = CaptionDataModule(plain["data"], plain["encoder"], plain["seed"])
    data.prepare_data()
    data.setup("fit")
    return plain, data, CaptioningModule(plain, data.vocab.itos)


def _resolve(plain, data, module, trainer=None):
    from captioning.lit.auto_precision import resolve_precision

    return resolve_precision(trainer or plain["trainer"], plain, module.model,
                             data.first_train_batches, data.vocab.pad)


def test_auto_training_precision_measures_this_model_once(cache, tiny_cfg, monkeypatch, caplog):
    plain, data, module = _tiny_run(tiny_cfg, "trainer.precision=auto", "trainer.accelerator=cpu")
    races = []
    real_race = precision._race

    def race(run, repeats, warmup=1):
        races.append(1)
        out = real_race(run, 1, 1)  # the real steps run (both precisions), the verdict is ours
        return {**out, "fp32_s": 1.0, "bf16_s": 0.5, "choice": "bf16"}

    monkeypatch.setattr(precision, "_race", race)
    rng = torch.get_rng_state()
    weights = {k: v.clone() for k, v in module.model.state_dict().items()}
    with caplog.at_level("INFO", logger="captioning"):
        chosen, why = _resolve(plain, data, module)
    assert (chosen, races) == ("bf16-mixed", [1]) and "fp32 1.000 s, bf16 0.500 s -> bf16" in why
    assert any("measured a training step" in r.getMessage() for r in caplog.records)
    # the run itself is untouched: its weights and its random stream
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, module.model.state_dict()[k]) for k, v in weights.items())
    # cached per machine and model: a second run (another process) does not measure again ...
    monkeypatch.setattr(precision, "_MEMO", {})
    assert _resolve(plain, data, module)[0] == "bf16-mixed" and races == [1]
    # ... but another model does
    plain2, data2, module2 = _tiny_run(tiny_cfg, "trainer.precision=auto", "attention=dot")
    _resolve(plain2, data2, module2)
    assert races == [1, 1]
    assert len(json.loads(cache.read_text())[precision.machine()]["train"]) == 2


def test_training_precision_from_config_is_not_measured(cache, tiny_cfg, monkeypatch):
    plain, data, module = _tiny_run(tiny_cfg, "trainer.precision=bf16-mixed")

    def never(*args, **kwargs):
        raise AssertionError("a precision given in the config must not be measured")

    monkeypatch.setattr(precision, "_race", never)
    assert _resolve(plain, data, module) == ("bf16-mixed", "trainer.precision")
    trainer = {**plain["trainer"], "precision": "auto", "accelerator": "cpu", "devices": 2}
    assert _resolve(plain, data, module, trainer)[0] == "32-true"  # several processes: fp32
    from captioning.lit import auto_precision as lit_precision

    monkeypatch.setattr(lit_precision, "accelerator_type", lambda cfg: "cuda")  # no GPU here
    for bf16, expected in ((True, "bf16-mixed"), (False, "32-true")):
        monkeypatch.setattr(lit_precision, "_has_bf16", lambda device, bf16=bf16: bf16)
        assert _resolve(plain, data, module, {**trainer, "devices": 1})[0] == expected


def test_training_falls_back_to_fp32_where_bf16_does_not_run(cache, tiny_cfg, monkeypatch):
    plain, data, module = _tiny_run(tiny_cfg, "trainer.precision=auto", "trainer.accelerator=cpu")
    from captioning.lit import auto_precision as lit_precision

    monkeypatch.setattr(lit_precision, "_step", _without_bf16(lit_precision._step))
    chosen, why = _resolve(plain, data, module)
    assert chosen == "32-true" and "bf16 n/a -> fp32" in why


def test_auto_is_what_the_run_records(tiny_cfg, cache):
    from captioning.lit.training import train

    results = train(tiny_cfg("trainer.precision=auto", "trainer.max_epochs=1",
                             "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
                             "trainer.limit_test_batches=1"))
    entry = json.loads(cache.read_text())[precision.machine()]["train"]
    (measured,) = entry.values()
    expected = {"bf16": "bf16-mixed", "fp32": "32-true"}[measured["choice"]]
    assert results["train_precision"] == expected
    assert results["train_precision_source"].startswith("auto: measured a training step here")


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_bf16_mixed_caches_casts_without_losing_gradients(decoder):
    """lit/bf16_plugin.py turns autocast's cast cache on: each weight's gradient must match the
    cache-less run's (Lightning's default), also with scheduled sampling, whose first pass casts
    the same weights under no_grad."""
    from conftest import TINY_DECODERS

    from captioning.lit.bf16_plugin import BF16Mixed
    from captioning.models import build_decoder

    torch.manual_seed(0)
    model = build_decoder({"name": decoder, **TINY_DECODERS[decoder]}, 50, 24, {"name": "additive"})
    features, tokens = torch.randn(3, 9, 24), torch.randint(4, 50, (3, 7))
    grads = []
    for context in (lambda: BF16Mixed("cpu").autocast_context_manager(),
                    lambda: torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False)):
        model.zero_grad()
        torch.manual_seed(1)  # the same dropout and the same scheduled-sampling draws
        with context():
            logits, _ = model(features, tokens, sample_prob=0.5)
        logits.float().square().mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    cached, uncached = grads
    assert cached.keys() == uncached.keys() and len(cached) > 5
    for name, g in uncached.items():
        assert g.abs().max() == 0 or cached[name].abs().max() > 0, f"{name} lost its gradient"
        # the cached run sums a weight's per-step gradients in bf16: close, not equal
        torch.testing.assert_close(cached[name], g, rtol=0.05, atol=0.05 * float(g.abs().max()) + 1e-6)


def test_a_resumed_run_keeps_the_precision_it_started_in(tiny_cfg, cache, monkeypatch, tmp_path):
    from omegaconf import open_dict

    from captioning.lit.training import train

    short = ["trainer.precision=auto", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
             "trainer.limit_test_batches=1"]
    monkeypatch.setattr(precision, "_race", lambda run, repeats, warmup=1: {
        "fp32_s": 1.0, "bf16_s": 0.5, "choice": "bf16"})
    first = train(tiny_cfg(*short, "trainer.max_epochs=1"))
    assert first["train_precision"] == "bf16-mixed"

    def never(*args, **kwargs):
        raise AssertionError("a resumed run must not measure again")

    monkeypatch.setattr(precision, "_race", never)
    cache.unlink()  # and a new measurement could choose otherwise
    cfg = tiny_cfg(*short, "trainer.max_epochs=2", f"resume={tmp_path / 'run'}")
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "second")
    resumed = train(cfg)
    assert resumed["resumed"] == 1 and resumed["train_precision"] == "bf16-mixed"
    assert resumed["train_precision_source"].endswith("(kept on resume)")
