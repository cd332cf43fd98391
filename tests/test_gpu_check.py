"""maint/gpu_check.sh, the one command for a fresh GPU machine, runs end to end here with
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
        ["bash", "maint/gpu_check.sh", "--device", "cpu", "--out", str(tmp_path / "check")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "check" / "summary.json").read_text())
    assert set(summary["phases"]) == {"bench_bf16", "bench_fp32", "train_lstm", "train_transformer"}
    assert all(p["exit"] == 0 for p in summary["phases"].values())
    assert set(summary["train"]) == {"lstm", "transformer"}
    md = (tmp_path / "check" / "summary.md").read_text()
    for decoder, row in summary["train"].items():  # the summary reports each run's own results
        results = json.loads((tmp_path / "check" / "runs" / decoder / "results.json").read_text())
        assert row == {k: results[k] for k in row} and results["decode/beam_size"] == 5
        assert f"| {decoder} | " + " | ".join(str(v) for v in row.values()) + " |" in md
        predictions = json.loads((tmp_path / "check" / "runs" / decoder / "predictions.json").read_text())
        assert len(predictions) == 9  # every test image captioned (data.synthetic.num_test=9)
    for precision in ("fp32", "bf16"):  # the benchmark's own results, one file per precision
        bench = json.loads((tmp_path / "check" / f"bench_{precision}.json").read_text())
        assert bench["default_precision"] == precision and bench["device"] == "cpu"
        # the modes asked for (--modes additive,dot; additive also behind the key refiner),
        # both decoders
        assert {k.rsplit("/", 1)[0] for k in bench["train"]} == {
            f"{d}/{m}" for d in ("lstm", "transformer")
            for m in ("additive", "dot", "additive+self_attention")}
        for t in bench["train"].values():  # derived figures follow from the timings
            assert t["min_s"] <= t["median_s"] <= t["max_s"]
            batch = bench["config"]["batch"]
            assert abs(t["captions_per_s"] * t["median_s"] - batch) < 1e-6 * batch
        assert (tmp_path / "check" / f"bench_{precision}.md").read_text() in md
    assert md.index("## Benchmark, bf16") < md.index("## Benchmark, fp32")
