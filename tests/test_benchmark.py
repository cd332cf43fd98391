"""The benchmark runs at tiny shapes and reports every field (speed targets live in the benchmark)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from captioning.models.cpu_speed.packed import available as packed_available

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "benchmark.py"
TINY = ["--batch", "2", "--grid", "2", "--feature-dim", "16", "--d-model", "16", "--vocab", "30",
        "--tokens", "3", "--repeats", "1", "--warmup", "0", "--beam", "2", "--beam-batch", "3",
        "--encoder", "resnet18", "--image-size", "32", "--encoder-images", "4",
        "--encoder-batch", "2", "--peak-size", "64", "--modes", "additive,dot,mixed"]


def test_benchmark_json_has_every_field(tmp_path):
    out, md = tmp_path / "bench.json", tmp_path / "bench.md"
    subprocess.run([sys.executable, str(SCRIPT), *TINY, "--json", str(out), "--markdown", str(md)],
                   check=True, capture_output=True, text=True, timeout=300)
    res = json.loads(out.read_text())
    assert set(res["peak"]) == {"fp32_flop_per_s", "bf16_flop_per_s"}
    assert all(v > 0 for v in res["peak"].values())
    assert set(res["train"]) == {
        "lstm/additive/fp32", "lstm/additive/fp32/naive", "lstm/additive/bf16",
        "lstm/additive/bf16/naive", "lstm/dot/fp32", "lstm/dot/bf16",
        f"lstm/mixed/{res['default_precision']}", "transformer/additive/fp32",
        "transformer/additive/bf16", "transformer/dot/fp32", "transformer/dot/bf16",
        f"transformer/mixed/{res['default_precision']}",
        # the key-side refiner's cost: additive with model.refiner=self_attention in front
        f"lstm/additive+self_attention/{res['default_precision']}",
        f"transformer/additive+self_attention/{res['default_precision']}",
    }
    for key, t in res["train"].items():
        assert {"median_s", "min_s", "max_s", "captions_per_s"} <= set(t) and t["captions_per_s"] > 0
        if "/additive/" in key or "/dot/" in key:
            assert t["flops_per_step"] > 0 and 0 < t["mfu"]
    # The naive baseline does strictly more matmul work than the prepared path.
    tr = res["train"]
    assert tr["lstm/additive/fp32/naive"]["flops_per_step"] > tr["lstm/additive/fp32"]["flops_per_step"]
    assert set(res["decode"]) == {
        "greedy_lstm", "greedy_lstm_naive", "greedy_transformer", "greedy_transformer_naive",
        "greedy_transformer_nocache", "beam2_lstm", "beam2_lstm_per_image", "beam2_transformer",
        "beam2_transformer_per_image",
    } | ({"greedy_lstm_unpacked", "greedy_transformer_unpacked"} if packed_available() else set())
    for t in res["decode"].values():
        assert {"median_s", "min_s", "max_s", "images_per_s"} <= set(t) and t["images_per_s"] > 0
    assert {"from_files", "bare_forward", "dtype"} <= set(res["encoder"])
    assert set(res["ratios"]) == {
        "train_lstm_additive_fp32_vs_naive_fp32", "train_lstm_additive_bf16_vs_naive_bf16",
        "train_lstm_additive_default_vs_naive_fp32", "train_lstm_additive_bf16_vs_fp32",
        "train_lstm_dot_over_additive_fp32", "train_lstm_dot_over_additive_bf16",
        "train_transformer_dot_over_additive_fp32", "train_transformer_dot_over_additive_bf16",
        "greedy_lstm_vs_naive", "greedy_transformer_vs_naive", "beam_batched_vs_per_image_lstm",
        "beam_batched_vs_per_image_transformer", "transformer_cache_speedup", "encoder_files_vs_bare",
    } | ({"greedy_lstm_packed_vs_unpacked", "greedy_transformer_packed_vs_unpacked"}
         if packed_available() else set())
    assert all(v > 0 for v in res["ratios"].values())
    assert "| ratio | x |" in md.read_text() and res["config"]["tokens"] == 3
    # Every derived figure is what its definition says, from the figures it is made of.
    batch, peak = res["config"]["batch"], res["peak"]
    for key, t in res["train"].items():
        assert t["min_s"] <= t["median_s"] <= t["max_s"]
        assert t["captions_per_s"] == pytest.approx(batch / t["median_s"])
        if "mfu" in t:
            ceiling = peak[f"{key.split('/')[2]}_flop_per_s"]  # the step's own precision
            assert t["mfu"] == pytest.approx(t["flops_per_step"] / t["median_s"] / ceiling)
    for key, t in res["decode"].items():
        images = res["config"]["beam_batch"] if key.startswith("beam") else batch
        assert t["images_per_s"] == pytest.approx(images / t["median_s"])
    r, de = res["ratios"], res["decode"]
    assert r["train_lstm_dot_over_additive_fp32"] == pytest.approx(
        tr["lstm/dot/fp32"]["captions_per_s"] / tr["lstm/additive/fp32"]["captions_per_s"])
    assert r["greedy_lstm_vs_naive"] == pytest.approx(
        de["greedy_lstm_naive"]["median_s"] / de["greedy_lstm"]["median_s"])
    assert r["transformer_cache_speedup"] == pytest.approx(
        de["greedy_transformer_nocache"]["median_s"] / de["greedy_transformer"]["median_s"])
    # FLOPs by torch's counter: the LSTM step's vocabulary head alone, forward and backward
    # (3 matmuls of batch*tokens x d_model x vocab), is part of it, and bf16 counts the same work.
    head = 3 * 2 * batch * 3 * 16 * 30
    assert tr["lstm/additive/fp32"]["flops_per_step"] > head
    assert tr["lstm/additive/bf16"]["flops_per_step"] == tr["lstm/additive/fp32"]["flops_per_step"]
    assert "| lstm/additive+self_attention/" in md.read_text()


def test_benchmark_imports_neither_hydra_lightning_wandb_nor_nltk():
    """It must run where only PyTorch is installed."""
    code = "\n".join([
        "import sys, runpy",
        "sys.argv = ['benchmark', '--help']",
        "try:",
        f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')",
        "except SystemExit:",
        "    pass",
        "bad = [m for m in ('hydra', 'omegaconf', 'pytorch_lightning', 'lightning', 'wandb', 'nltk')"
        " if m in sys.modules]",
        "assert not bad, bad",
    ])
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_captions_per_image_shares_each_images_keys(tmp_path):
    """--captions-per-image 3: a step trains batch x 3 captions of `batch` images; the keys and
    values are made once per image, so its matmul work is less than 3 images' worth per caption
    would cost (the same captions with one image each)."""
    flops = {}
    for per_image, batch in ((3, 2), (1, 6)):
        out = tmp_path / f"spi{per_image}.json"
        subprocess.run([sys.executable, str(SCRIPT), "--sections", "train", "--decoders", "lstm",
                        "--modes", "dot", "--refiners", "", "--batch", str(batch),
                        "--captions-per-image", str(per_image), "--grid", "2", "--feature-dim", "64",
                        "--d-model", "16", "--vocab", "30", "--tokens", "3", "--repeats", "1",
                        "--warmup", "0", "--peak-size", "64", "--json", str(out)],
                       check=True, capture_output=True, text=True, timeout=300)
        t = json.loads(out.read_text())["train"]["lstm/dot/fp32"]
        assert t["captions_per_s"] == pytest.approx(6 / t["median_s"])  # 6 captions a step both
        flops[per_image] = t["flops_per_step"]
    assert flops[3] < flops[1]


def test_cpu_speed_times_each_trick_on_and_off_and_leaves_them_on(tmp_path):
    """--sections cpu_speed: every switchable trick at both precisions; the switches it flips
    are back on afterwards (it runs in the caller's process through run_benchmark)."""
    import torch

    from captioning.benchmark import BenchConfig, markdown, run_benchmark
    from captioning.models.attention.additive import AdditiveAttention
    from captioning.models.decoders.lstm import LSTMDecoder

    flags = dict(zip([f.lstrip("-").replace("-", "_") for f in TINY[::2]], TINY[1::2]))
    ints = {k: int(v) for k, v in flags.items() if v.isdigit()}
    res = run_benchmark(BenchConfig(**{**flags, **ints, "sections": "cpu_speed", "refiners": ""}))
    tricks = ("step_linear/train", "half_tanh/train", "packed/greedy")
    want = {f"{t}/{p}" for t in tricks for p in ("fp32", "bf16")}
    assert set(res["cpu_speed"]) == want | {"denormal_flush/products/fp32"}
    assert all(t["on_s"] > 0 and t["off_s"] > 0 and t["speedup"] > 0 for t in res["cpu_speed"].values())
    assert "| half_tanh/train/fp32 |" in markdown(res)
    assert LSTMDecoder.fused_training_steps and AdditiveAttention.tanh_through_sigmoid
    assert torch.tensor([1e-40]).item() == 0.0  # the denormal flush is on again


def test_half_tanh_and_its_reference_compute_one_function():
    """The sigmoid form and torch.tanh's agree to float32 rounding, and so do additive's scores
    with the switch on and off (the benchmark times two forms of one function)."""
    import torch

    from captioning.models.attention.additive import AdditiveAttention
    from captioning.models.cpu_speed import half_tanh_, half_tanh_reference

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 1, 8, generator=g) * 3, torch.randn(1, 5, 8, generator=g) * 3
    torch.testing.assert_close(half_tanh_(q, k), half_tanh_reference(q, k), rtol=0, atol=1e-6)
    attn = AdditiveAttention(16, 12, attn_dim=8)
    keys = attn.prepare(torch.randn(2, 5, 12, generator=g))
    query = torch.randn(2, 16, generator=g)
    on, _ = attn(query, keys)
    AdditiveAttention.tanh_through_sigmoid = False
    try:
        off, _ = attn(query, keys)
    finally:
        AdditiveAttention.tanh_through_sigmoid = True
    torch.testing.assert_close(on, off, rtol=1e-5, atol=1e-6)
