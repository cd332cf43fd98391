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
