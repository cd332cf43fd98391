"""The benchmark runs at tiny shapes and reports every field (speed targets live in the benchmark)."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "benchmark.py"


def test_benchmark_json_has_every_field(tmp_path):
    out = tmp_path / "bench.json"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--batch", "2", "--grid", "2", "--feature-dim", "16",
         "--d-model", "16", "--vocab", "30", "--tokens", "3", "--repeats", "1", "--warmup", "0",
         "--beam", "2", "--beam-batch", "3",
         "--json", str(out)],
        check=True, capture_output=True, text=True,
    )
    res = json.loads(out.read_text())
    assert set(res["decode"]) == {
        "greedy_lstm", "greedy_transformer", "greedy_transformer_nocache", "beam2_lstm",
        "beam2_lstm_per_image", "beam2_transformer", "beam2_transformer_per_image",
    }
    for t in res["decode"].values():
        assert {"median_s", "min_s", "max_s", "images_per_s"} <= set(t) and t["images_per_s"] > 0
    assert res["transformer_cache_speedup"] > 0 and res["config"]["tokens"] == 3
    assert res["beam_batching_speedup_lstm"] > 0 and res["beam_batching_speedup_transformer"] > 0
