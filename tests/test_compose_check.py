"""A mistake Hydra finds while composing the command line (an option a group lacks, a key the
config lacks, a value of the wrong type, an unreadable override) ends every command the way a
user error does: one line on stderr, `error: ...`, exit status 2, before any work; a sweep is
checked value by value; Hydra's own flags and good overrides pass untouched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from captioning.compose_check import _variants, check_overrides

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], tmp_path: Path, script: str = "train.py") -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(ROOT / script), *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)


def _one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize("args, words", [
    (["attention=nonsense"], ["attention=nonsense", "its options:", "additive", "scaled_dot"]),
    (["decoder.nonexistent=1"], ["decoder.nonexistent", "+decoder.nonexistent=1", "not in"]),
    (["seed=abc"], ["seed=abc", "Integer"]),
    (["data.batch_size=[1"], ["cannot read an override", "key=value"]),
    (["-m", "attention=additive,nonsense", "seed=0,1"], ["attention=nonsense", "its options:"]),
])
def test_a_composition_mistake_is_one_line_and_nothing_starts(args, words, tmp_path):
    line = _one_line(_run(args, tmp_path))
    assert all(w in line for w in words), line
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.parametrize("script, args, word", [
    ("scripts/evaluate.py", ["checkpoint=x.ckpt", "decode.beam_size=abc"], "decode.beam_size=abc"),
    ("scripts/compare.py", ["experiment=nonsense"], "cross_modal_quick"),
    ("scripts/caption.py", ["checkpoint=x.ckpt", "image=x.png", "decode=nonsense"], "decode=nonsense"),
    ("scripts/gallery.py", ["runs=[x]", "nonexistent_key=1"], "nonexistent_key"),
    ("scripts/prepare_data.py", ["data=nonsense"], "flickr8k"),
    ("scripts/extract_features.py", ["encoder=nonsense"], "resnet50"),
])
def test_every_hydra_script_checks_its_overrides(script, args, word, tmp_path):
    assert word in _one_line(_run(args, tmp_path, script))


def test_good_overrides_and_hydras_own_flags_pass_untouched(tmp_path):
    check_overrides("train", ["attention=dot", "decoder=transformer", "seed=3", "+extra_key=1"])
    check_overrides("train", ["-m", "attention=additive,dot", "seed=range(0,3)",
                              "optim.optimizer.lr=tag(log, interval(0.0003, 0.01))"])
    check_overrides("train", ["--cfg", "job", "attention=nonsense"])  # Hydra reports it itself
    done = _run(["--cfg", "job", "attention=dot"], tmp_path)
    assert done.returncode == 0 and "name: dot" in done.stdout


def test_a_sweep_is_checked_one_value_at_a_time():
    variants = list(_variants(["attention=additive,dot,nonsense", "seed=0,1", "trainer.max_epochs=2"]))
    assert variants[0] == ["trainer.max_epochs=2", "attention=additive", "seed=0"]
    assert sorted(v[1] for v in variants) == ["attention=additive", "attention=additive", "attention=dot",
                                              "attention=nonsense"]
    assert ["trainer.max_epochs=2", "attention=additive", "seed=1"] in variants and len(variants) == 4
