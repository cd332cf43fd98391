"""flush_denormals: denormal floats become zero on the CPU, and training turns it on."""

import pytest
import torch

from captioning.device import flush_denormals

TINY = 1e-39  # a float32 denormal (the smallest normal is ~1.18e-38)


@pytest.fixture
def restore():
    yield
    torch.set_flush_denormal(False)


def _survives() -> bool:
    return bool((torch.tensor([TINY]) * 1.0).item() != 0.0)


def test_denormals_are_flushed_to_zero(restore):
    torch.set_flush_denormal(False)
    if not _survives():
        pytest.skip("this CPU flushes denormals already")
    if not flush_denormals():
        pytest.skip("this CPU cannot flush denormals")
    assert not _survives()
    assert (torch.tensor([1e-30]) * 1.0).item() == pytest.approx(1e-30)  # normal numbers untouched


# A fresh process (the malloc settings are per process, and this one may have made them already):
# training steps of the LSTM with additive attention, whose tensors (up to a few MB here) are
# born and freed at every step; prints set_malloc's answer and the page faults of the last 4 steps.
_STEPS = """
import argparse, resource, sys, torch
from captioning import device
from captioning.benchmark.sections import decoder_cfg, train_step
from captioning.models.decoders import build_decoder
device.MALLOC_OPTIONS = eval(sys.argv[1]) or device.MALLOC_OPTIONS
ok = device.set_malloc()
torch.manual_seed(0)
dec = build_decoder(decoder_cfg("lstm", argparse.Namespace(d_model=256)), 3000, 1024,
                    {"name": "additive"}).train()
opt = torch.optim.AdamW(dec.parameters(), lr=1e-4)
step = train_step(dec, torch.randn(32, 49, 1024), torch.randint(4, 3000, (32, 16)), opt,
                  torch.float32, torch.device("cpu"))
for _ in range(4):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    step()
print(ok, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _steps(options: str = "None", env: dict | None = None) -> tuple[str, int]:
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _STEPS, options], env={**os.environ, **(env or {})},
                         check=True, capture_output=True, text=True).stdout.split()
    return out[0], int(out[1])


def test_a_steps_memory_is_reused_without_page_faults():
    ok, faults = _steps()
    if ok != "True":
        pytest.skip("not glibc: set_malloc leaves the C library alone")
    assert faults < 2000  # 3-850 seen; glibc's defaults: 2,900-19,500, trim alone: ~200,000


def test_the_fault_count_sees_memory_handed_back():
    """The check above can fail: with the trim threshold alone set (glibc then stops adapting its
    mmap threshold: every tensor past 128 KB is mmapped and unmapped), the steps fault."""
    ok, faults = _steps("{-1: 1 << 30}")
    if ok != "True":
        pytest.skip("not glibc")
    assert faults > 30_000


def test_a_users_malloc_settings_win():
    ok, _ = _steps(env={"MALLOC_ARENA_MAX": "8"})
    assert ok == "False"
