"""scripts/gpu_check.sh, the one command for a fresh GPU machine, runs end to end here with
--device cpu (tiny shapes): version check, benchmark in bf16 and fp32, a short training run per
decoder with beam evaluation, summary.json/summary.md."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_on_cpu(tmp_path):
    proc = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--device", "cpu", "--out", str(tmp_path / "check")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "check" / "summary.json").read_text())
    assert set(summary["phases"]) == {"bench_bf16", "bench_fp32", "train_lstm", "train_transformer"}
    assert all(p["exit"] == 0 for p in summary["phases"].values())
    assert set(summary["train"]) == {"lstm", "transformer"}
    assert all(0 <= r["test/bleu4"] <= 1 for r in summary["train"].values())
    for precision in ("fp32", "bf16"):  # the benchmark's own results, one file per precision
        bench = json.loads((tmp_path / "check" / f"bench_{precision}.json").read_text())
        assert bench["default_precision"] == precision and bench["device"] == "cpu"
        assert bench["train"] and bench["decode"]
        assert all(t["median_s"] > 0 for t in [*bench["train"].values(), *bench["decode"].values()])
    assert "## Benchmark, bf16" in (tmp_path / "check" / "summary.md").read_text()
