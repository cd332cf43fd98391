"""Every reader of a checkpoint refuses a file crafted to run code (its payload never runs) and
names the file and the problem for an empty, truncated or foreign one."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from captioning import load_checkpoint
from captioning.checkpoint import CheckpointError, read_checkpoint

ROOT = Path(__file__).resolve().parents[1]


class Payload:
    """Unpickling this runs `touch <marker>` (os.system), as a malicious checkpoint would."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def write_malicious(path: Path, marker: Path) -> Path:
    torch.save({"state_dict": {}, "hyper_parameters": Payload(marker)}, path)
    return path


def test_load_checkpoint_refuses_code_and_never_runs_it(tmp_path):
    marker = tmp_path / "pwned"
    evil = write_malicious(tmp_path / "evil.ckpt", marker)
    refused = r"refused to load .*evil\.ckpt.*system.*nothing in it was executed"
    with pytest.raises(CheckpointError, match=refused) as err:
        load_checkpoint(evil)
    assert "weights_only=False" not in str(err.value)  # never the hint to disable the guard
    assert not marker.exists()


@pytest.mark.parametrize("script", ["evaluate", "caption"])
def test_scripts_refuse_code(script, tmp_path):
    from PIL import Image

    marker = tmp_path / "pwned"
    evil = write_malicious(tmp_path / "evil.ckpt", marker)
    Image.new("RGB", (64, 64)).save(tmp_path / "x.png")
    args = [f"checkpoint={evil}"] + ([f"image={tmp_path / 'x.png'}"] if script == "caption" else [])
    proc = subprocess.run([sys.executable, f"scripts/{script}.py", *args], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "refused to load" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()


def test_resume_refuses_code(tiny_cfg, tmp_path):
    from captioning.lit import train

    run = tmp_path / "killed"
    marker = tmp_path / "pwned"
    (run / "checkpoints").mkdir(parents=True)
    write_malicious(run / "checkpoints" / "last.ckpt", marker)
    with pytest.raises(FileNotFoundError, match="no intact checkpoint.*refused to load"):
        train(tiny_cfg(f"resume={run}"))
    assert not marker.exists()


def test_empty_truncated_and_foreign_files_are_named(tmp_path):
    import torchvision

    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"empty\.ckpt is empty \(0 bytes\)"):
        read_checkpoint(empty)

    whole = tmp_path / "whole.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, whole)
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    truncated = r"cut\.ckpt \(\d+ bytes\) is not a PyTorch checkpoint.*truncated"
    with pytest.raises(CheckpointError, match=truncated):
        read_checkpoint(cut)

    text = tmp_path / "notes.ckpt"
    text.write_text('{"not": "a checkpoint"}')
    with pytest.raises(CheckpointError, match="notes.ckpt .* is not a PyTorch checkpoint"):
        read_checkpoint(text)

    weights = tmp_path / "resnet18.pth"
    torch.save(torchvision.models.resnet18().state_dict(), weights)
    bare = r"resnet18\.pth was written by a bare state_dict of \d+ tensors"
    with pytest.raises(CheckpointError, match=bare):
        read_checkpoint(weights)

    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {}, "pytorch-lightning_version": "2.6.6"}, other)
    with pytest.raises(CheckpointError, match="written by PyTorch Lightning 2.6.6, but not by captioning"):
        load_checkpoint(other)
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        read_checkpoint(tmp_path / "missing.ckpt")
    shutil.rmtree(tmp_path)
