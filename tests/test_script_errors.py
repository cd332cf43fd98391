"""Every command in scripts/ and maint/ (and train.py) answers a user's mistake the same way: one line on
stderr naming what is wrong, exit status 2, no traceback, before any long work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOPE = "/nonexistent/nope"

# script -> (arguments with one mistake, a word the message must contain)
MAINT = {
    "encoder_candidates.py": ([], "--out"),
    "lock_requirements.py": (["--check", "--out", f"{NOPE}.lock"], "nope.lock"),
    "make_wheels.py": (["--torch", "3.0", "--dest", f"{NOPE}-wheels"], "only torch 2.x"),
    "name_cells_by_record.py": (["--no-such-flag"], "--no-such-flag"),
    "commit_cells.py": ([NOPE], "no grid of that name"),
    "encoder_record.py": (["restore", "convergence"], "no pinned weights file"),
    "make_docs.py": (["--no-such-flag"], "--no-such-flag"),
    "peer_benchmark.py": ([], "--peer"),
}
MISTAKES = {
    "benchmark.py": (["--no-such-flag"], "--no-such-flag"),
    "caption.py": ([f"checkpoint={NOPE}.ckpt", "image=x.png"], "checkpoint not found"),
    "compare.py": (["experiment=cross_modal_quick", "compare.train=false",
                    f"compare.throughput_from={NOPE}.json"], "compare.throughput_from"),
    "evaluate.py": ([f"checkpoint={NOPE}.ckpt"], "checkpoint not found"),
    "extract_features.py": ([], "extract.out is not set"),
    "export_encoder.py": ([f"{NOPE}.ckpt", "out.pth"], "checkpoint not found"),
    "gallery.py": ([f"runs=[{NOPE}]"], "no predictions.json"),
    "prepare_data.py": (["data=flickr8k", f"data.json_path={NOPE}.json"], "dataset JSON not found"),
    "pretrain_encoder.py": ([], "--out"),
    "score.py": ([f"{NOPE}.json", f"{NOPE}-refs.json"], "nope.json"),
}


def _run(cmd: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def test_every_script_is_covered():
    shipped = {p.name for p in (ROOT / "scripts").iterdir() if p.suffix in (".py", ".sh")}
    assert shipped == set(MISTAKES)
    tools = {p.name for p in (ROOT / "maint").iterdir() if p.suffix in (".py", ".sh")}
    # a module the tools import is not a command: it has no entry point to make mistakes at
    modules = {p.name for p in (ROOT / "maint").glob("*.py") if "__main__" not in p.read_text()}
    assert modules == {"docs_records.py", "docs_speed.py", "docs_studies.py"}
    assert tools - modules == set(MAINT) | {"gpu_check.sh"}


@pytest.mark.parametrize("script", [f"scripts/{s}" for s in sorted(MISTAKES)]
                         + [f"maint/{s}" for s in sorted(MAINT)])
def test_a_mistake_is_one_line_and_exit_status_2(script, tmp_path):
    args, word = {**MISTAKES, **MAINT}[script.split("/")[1]]
    done = _run([sys.executable, str(ROOT / script), *args], tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and word in lines[0], done.stderr[-2000:]


def test_train_py_mistake_is_a_message_and_exit_status_2(tmp_path):
    """train.py lists every config problem at once (one line each), before any work, and leaves no
    run dir behind."""
    done = _run([sys.executable, str(ROOT / "train.py"), "data=flickr8k", f"data.json_path={NOPE}.json",
                 "encoder.pretrained=false", "logger=none"], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: bad config (nothing was started)")
    assert f"data.json_path={NOPE}.json: no such file" in done.stderr
    # and nothing is left behind: Hydra's run dir of the refused run is removed
    assert (tmp_path / "outputs").is_dir() and not list((tmp_path / "outputs").rglob(".hydra"))


@pytest.mark.parametrize("mistake", ["flag", "no-gpu"])
def test_gpu_check_mistakes_are_one_line_and_exit_status_2(mistake, tmp_path):
    if mistake == "no-gpu":
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is here: --device cuda is no mistake")
    args, word = {"flag": (["--bogus"], "usage:"),
                  "no-gpu": (["--device", "cuda", "--out", str(tmp_path / "out")], "--device cuda")}[mistake]
    done = subprocess.run(["bash", str(ROOT / "maint" / "gpu_check.sh"), *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHON": sys.executable}, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and word in lines[0], done.stderr
