"""The CPU precision is chosen by measuring, once per machine, and cached: reused without a
second timing, overridden by config, fp32 where bf16 does not run or is not faster."""

from __future__ import annotations

import json

import pytest
import torch

from captioning.models import precision

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
    real = precision._seconds

    def no_bf16(step, dtype, repeats=5):
        if dtype == torch.bfloat16:
            raise RuntimeError("no bf16 kernel")
        return real(step, dtype, 1)

    monkeypatch.setattr(precision, "_seconds", no_bf16)
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
