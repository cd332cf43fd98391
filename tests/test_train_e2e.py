"""End to end on a tiny dataset and model: train -> checkpoint -> results -> load -> decode."""

import json
import platform

import pytest
import torch

from captioning import load_checkpoint
from captioning.data.prepare import prepare_data, usable_data
from captioning.lit import train
from captioning.models import ATTENTIONS

RESULT_KEYS = {
    "test/bleu1", "test/bleu2", "test/bleu3", "test/bleu4", "test/cider", "test/attr_acc",
    "test/attr_acc_colour", "test/attr_acc_shape", "test/attr_acc_size", "test/attr_acc_position",
    "wall_time_s", "seed", "config_hash", "git_commit", "params", "decode/beam_size", "decode/alpha",
    "test/grounding", "test/grounding_uniform", "test/grounding_ratio", "first_step_s",
    "median_step_s", "media_s", "machine", "accelerator", "feature_precision", "train_captions_per_s",
    "cpu_s", "threads", "train_precision", "monitor", "best_score",
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_dir):
    from conftest import TINY, compose_cfg, shrink

    out = tmp_path_factory.mktemp("run")
    cfg = shrink(compose_cfg(TINY + ["logger=csv"], out, data_dir))
    return cfg, train(cfg), out


def test_results_json_and_predictions(trained):
    cfg, results, out = trained
    saved = json.loads((out / "results.json").read_text())
    assert RESULT_KEYS <= saved.keys()
    assert saved == results
    assert saved["machine"].endswith(")") and saved["accelerator"] is None  # "<cpu> (<kind>)"; CPU run
    assert saved["feature_precision"] in ("float32", "bfloat16")
    assert saved["threads"] == torch.get_num_threads()
    # captions per second of optimisation steps: tiny steps, a few captions each, so > 1 and it
    # agrees with the median step (4 images x 5 captions per step here)
    assert saved["train_captions_per_s"] > 1
    assert 0.2 < saved["train_captions_per_s"] * saved["median_step_s"] / 20 < 5
    # compute cost in CPU seconds: positive, and at most every thread busy all the time
    assert 0 < saved["cpu_s"] <= saved["wall_time_s"] * torch.get_num_threads() * 1.5 + 5
    assert all(0.0 <= saved[f"test/bleu{n}"] <= 1.0 for n in range(1, 5))
    assert saved["monitor"] == "val/bleu4" and 0.0 <= saved["best_score"] <= 1.0
    preds = json.loads((out / "predictions.json").read_text())
    assert len(preds) == cfg.data.synthetic.num_test
    assert {"image_id", "caption"} == set(preds[0])
    assert (out / "csv" / "metrics.csv").is_file()
    if platform.machine() in ("x86_64", "AMD64"):  # train() flushes denormals (models/cpu_speed/process.py)
        assert (torch.tensor([1e-39]) * 1.0).item() == 0.0


def test_checkpoint_is_plain_data_and_round_trips(trained, data_dir):
    cfg, results, out = trained
    for name in ("best.ckpt", "last.ckpt"):
        ckpt = torch.load(out / "checkpoints" / name, map_location="cpu", weights_only=True)
        hp = ckpt["hyper_parameters"]
        assert set(hp) == {"format_version", "cfg", "vocab"}
        assert isinstance(hp["cfg"], dict) and isinstance(hp["vocab"], list)
    model, vocab, loaded_cfg = load_checkpoint(out / "checkpoints" / "best.ckpt")
    assert loaded_cfg["attention"]["name"] == "additive"
    # Decoding the test split with the loaded model, from the raw cached features (the model
    # normalises them itself), reproduces the run's predictions.
    data = usable_data(loaded_cfg["data"], loaded_cfg["encoder"])
    test = data.split_indices("test")
    assert loaded_cfg["decode"]["beam_size"] == 5  # the test stage's default: beam search
    ids, _ = model.generate(data.raw_features(test), vocab.bos, vocab.eos, vocab.pad, **loaded_cfg["decode"])
    captions = [" ".join(vocab.decode(t)) for t in ids]
    preds = json.loads((out / "predictions.json").read_text())
    assert captions == [p["caption"] for p in preds]


def test_training_beats_its_own_untrained_start(trained):
    """Three epochs learn something: the trained model's test BLEU-1 is above the same model's
    at initialisation (same config, seed, features and decoding). A control, not a threshold:
    it holds whatever the CPU's kernels make of the numbers."""
    from conftest import untrained_bleu1

    _, results, out = trained
    untrained = untrained_bleu1(out)
    assert results["test/bleu1"] > untrained, (results["test/bleu1"], untrained)


def test_same_seed_same_metrics(tmp_path):
    """Determinism on one machine: the first run (cold caches: dataset generated, features
    extracted) equals a re-run in another run dir, metrics and config_hash alike (the run dir is
    not part of the hash); another seed gives other metrics and another hash."""
    from conftest import TINY, compose_cfg, shrink

    def run(name, *extra):
        over = TINY + ["attention=dot", "trainer.max_epochs=1", *extra]
        return train(shrink(compose_cfg(over, tmp_path / name, tmp_path / "fresh-data")))

    a, b, c = run("a"), run("b"), run("c", "seed=1")
    metrics = lambda r: {k: v for k, v in r.items() if k.startswith("test/")}  # noqa: E731
    assert metrics(a) == metrics(b) and a["config_hash"] == b["config_hash"]
    wa = torch.load(tmp_path / "a/checkpoints/last.ckpt", weights_only=True)["state_dict"]
    wb = torch.load(tmp_path / "b/checkpoints/last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # bitwise-equal weights
    assert metrics(c) != metrics(a) and c["config_hash"] != a["config_hash"]


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
def test_beam_search_in_test_stage(tiny_cfg, decoder):
    greedy = train(tiny_cfg(f"decoder={decoder}", "trainer.max_epochs=1"))
    beam = train(tiny_cfg(f"decoder={decoder}", "trainer.max_epochs=1", "decode.beam_size=3",
                          "decode.alpha=0.5", "decode.block_ngram=3"))
    assert 0.0 <= beam["test/bleu4"] <= 1.0 and beam["test/attn_entropy"] > 0
    assert beam["config_hash"] != greedy["config_hash"]  # decoding settings are part of the run


def test_blind_flag_zeroes_features(tiny_cfg):
    cfg = tiny_cfg("data.blind=true")
    data = prepare_data(dict(cfg.data), dict(cfg.encoder))
    raw = data.raw_features(range(4))
    assert raw.abs().max() > 0  # the store keeps the real features ...
    assert data.normalizer(raw).abs().max() == 0  # ... the model's normaliser zeroes them


@pytest.mark.parametrize("decoder", ["lstm", "transformer"])
@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_every_attention_mode_trains(tiny_cfg, name, decoder):
    results = train(tiny_cfg(f"attention={name}", f"decoder={decoder}", "trainer.max_epochs=1"))
    assert 0.0 <= results["test/bleu4"] <= 1.0
    assert results["test/attn_entropy"] >= 0.0 and 0.0 < results["test/attn_max"] <= 1.0
    assert results["attention_resolved"] == ("additive" if name == "mixed" else name)
    if name == "gated_mixed":
        assert 0.0 < results["test/attn_gate"] < 1.0


def test_matched_width_pca_features_train_and_reload(tiny_cfg):
    """encoder.pca_dim: the decoder sees 16-d PCA features; the checkpoint rebuilds that width."""
    cfg = tiny_cfg("encoder.pca_dim=16", "trainer.max_epochs=1", "attention=mixed")
    results = train(cfg)
    assert results["attention_resolved"] == "additive"  # query 64 != key 16
    model, _, _ = load_checkpoint(f"{cfg.paths.output_dir}/checkpoints/last.ckpt")
    assert model.normalizer.out_dim == 16 and model.decoder.attention.key_dim == 16


@pytest.mark.slow
def test_model_compile_trains_and_reports_its_first_step(tiny_cfg, tmp_path, monkeypatch):
    """model.compile=true: the attention modules are compiled (gcc on CPU); the compile cost
    lands in first_step_s, and the run's numbers match the eager run closely."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    eager = train(tiny_cfg("trainer.max_epochs=1", "decode.beam_size=1"))
    compiled = train(tiny_cfg("trainer.max_epochs=1", "decode.beam_size=1", "model.compile=true"))
    assert compiled["first_step_s"] > compiled["median_step_s"]
    assert compiled["test/bleu4"] == pytest.approx(eager["test/bleu4"], abs=0.05)


def test_bf16_mixed_trains_with_the_fused_optimizer_and_clipping(tiny_cfg):
    """trainer=gpu's precision (bf16-mixed) with the default fused AdamW and gradient clipping:
    Lightning alone refuses the pair for any device (lit/bf16_plugin.py says why it is safe for bf16);
    here on the CPU, where trainer.precision=bf16-mixed is the same code path."""
    from captioning.lit.bf16_plugin import BF16Mixed
    from captioning.lit.training import build_trainer

    trainer = build_trainer({"_target_": "pytorch_lightning.Trainer", "accelerator": "cpu",
                             "precision": "bf16-mixed", "logger": False, "enable_checkpointing": False})
    assert isinstance(trainer.precision_plugin, BF16Mixed) and trainer.precision == "bf16-mixed"
    results = train(tiny_cfg("trainer.precision=bf16-mixed", "trainer.max_epochs=1",
                             "trainer.limit_train_batches=3", "trainer.limit_val_batches=1",
                             "trainer.limit_test_batches=1", "trainer.gradient_clip_val=0.01"))
    assert results["train_precision"] == "bf16-mixed"
