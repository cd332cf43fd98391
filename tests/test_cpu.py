"""flush_denormals: denormal floats become zero on the CPU, and training turns it on."""

from statistics import median_high

import pytest
import torch

from captioning.models.cpu_speed import flush_denormals

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
# born and freed at every step. argv[1]: the mallopt options to set ("None": ours, "{}": leave
# glibc's defaults, the control). Prints set_malloc's answer and the page faults of each of
# 16 steps after 8 warm-up steps.
_STEPS = """
import argparse, resource, sys, torch
from captioning.models.cpu_speed import process as device
from captioning.benchmark.sections import decoder_cfg, train_step
from captioning.models.decoders import build_decoder
options = eval(sys.argv[1])
device.MALLOC_OPTIONS = device.MALLOC_OPTIONS if options is None else options
ok = device.set_malloc() if device.MALLOC_OPTIONS else "control"
torch.manual_seed(0)
dec = build_decoder(decoder_cfg("lstm", argparse.Namespace(d_model=256)), 3000, 1024,
                    {"name": "additive"}).train()
opt = torch.optim.AdamW(dec.parameters(), lr=1e-4)
step = train_step(dec, torch.randn(32, 49, 1024), torch.randint(4, 3000, (32, 16)), opt,
                  torch.float32, torch.device("cpu"))
for _ in range(8):
    step()
faults = []
for _ in range(16):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(ok, *faults)
"""


def _steps(options: str = "None", env: dict | None = None) -> tuple[str, list[int]]:
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _STEPS, options], env={**os.environ, **(env or {})},
                         check=True, capture_output=True, text=True).stdout.split()
    return out[0], [int(n) for n in out[1:]]


def _saves(faults: list[int], control: list[int]) -> bool:
    """The steps fault their memory in again at most a tenth as often as glibc's defaults make
    them (median step), and fewer pages in all."""
    return median_high(faults) * 10 <= median_high(control) and sum(faults) < sum(control)


@pytest.fixture(scope="module")
def control() -> list[int]:
    """glibc's defaults on this machine (set_malloc not called)."""
    _, faults = _steps("{}")
    if median_high(faults) < 100:
        pytest.skip(f"glibc's defaults fault little here too (median {median_high(faults)} a step: "
                    "huge pages?): nothing for set_malloc to save")
    return faults


def test_a_steps_memory_is_reused_without_page_faults(control):
    """With set_malloc most steps fault no page in (the heap grows now and then: single steps of
    up to ~2,700 faults are seen, so no step or short sum is checked against a number); with
    glibc's defaults, on the same machine, most steps fault their big tensors in again (median
    2,300-3,900 a step on an AVX-512 EPYC)."""
    ok, ours = _steps()
    if ok != "True":
        pytest.skip("not glibc: set_malloc leaves the C library alone")
    assert _saves(ours, control), (ours, control)


def test_the_fault_count_sees_memory_handed_back(control):
    """The check above can fail: with the trim threshold alone set (glibc then stops adapting its
    mmap threshold: every tensor past 128 KB is mmapped and unmapped), every step faults (median
    ~50,000 a step, against the defaults' ~3,000)."""
    ok, faults = _steps("{-1: 1 << 30}")
    if ok != "True":
        pytest.skip("not glibc")
    assert not _saves(faults, control), (faults, control)


def test_a_users_malloc_settings_win():
    ok, _ = _steps(env={"MALLOC_ARENA_MAX": "8"})
    assert ok == "False"
