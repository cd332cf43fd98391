"""maint/commit_cells.py on a scratch git repository: a finished cell is committed alone (its
kept files, a message from its records), a cell still training and a staged unrelated file are
left as they were, and a cell whose record does not hash to its folder is refused."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from captioning.provenance import fingerprint

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("commit_cells", ROOT / "maint" / "commit_cells.py")
commit_cells = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(commit_cells)

RECORD = {"decoder": {"name": "lstm"}, "attention": {"name": "dot"}, "seed": 3,
          "encoder": {"name": "resnet50", "pca_dim": 512, "normalize": "pca_whiten"},
          "optim": {"optimizer": {"lr": 0.003}}}
RESULTS = {"test/bleu4": 0.6812, "test/cider": 3.4567, "best_score": 0.7001, "epochs_trained": 21,
           "cpu_s": 3456.7, "encoder_sha256": "32787778" + "0" * 56}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _cell(repo: Path, record: dict, results: dict | None, name: str | None = None) -> Path:
    cell = repo / "results" / "g" / "cells" / (name or fingerprint(record))
    (cell / "checkpoints").mkdir(parents=True)
    (cell / "cell.json").write_text(json.dumps(record))
    (cell / "checkpoints" / "last.ckpt").write_text("weights")  # ignored: never committed
    if results is not None:
        (cell / "results.json").write_text(json.dumps(results))
        (cell / "predictions.json").write_text("[]")
    return cell


@pytest.fixture
def repo(tmp_path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("no git")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    (tmp_path / "README.md").write_text("x\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "start")
    return tmp_path


def test_a_finished_cell_is_committed_alone_with_its_records_in_the_message(repo):
    done = _cell(repo, RECORD, RESULTS)
    running = _cell(repo, {**RECORD, "seed": 4}, None)
    (repo / "other.txt").write_text("staged, not a cell\n")
    _git(repo, "add", "other.txt")

    listed, refused = commit_cells.commit_cells(repo, "g", apply=False)
    assert len(listed) == 1 and not refused
    assert _git(repo, "log", "--oneline").count("\n") == 1  # listing commits nothing

    committed, refused = commit_cells.commit_cells(repo, "g", apply=True)
    assert committed == listed and not refused
    text = _git(repo, "log", "-1", "--format=%s")
    for part in ("g cell: lstm/dot, resnet50 512-d (pca_whiten), lr 0.003, seed 3",
                 "test BLEU-4 0.681", "CIDEr-D 3.457", "validation 0.700", "21 epochs", "3,457 CPU s",
                 "encoder 32787778"):
        assert part in text, (part, text)
    files = set(_git(repo, "show", "--name-only", "--format=", "HEAD").split())
    rel = done.relative_to(repo)
    assert files == {f"{rel}/cell.json", f"{rel}/results.json", f"{rel}/predictions.json"}
    assert "A  other.txt" in _git(repo, "status", "--short")  # still staged, not committed
    assert not any(str(running.name) in f for f in _git(repo, "ls-files").split())
    assert commit_cells.commit_cells(repo, "g", apply=True) == ([], [])  # nothing left to commit


def test_a_cell_whose_record_hashes_elsewhere_is_refused(repo):
    cell = _cell(repo, RECORD, RESULTS, name="0" * 40)
    committed, refused = commit_cells.commit_cells(repo, "g", apply=True)
    assert committed == [] and len(refused) == 1
    assert cell.name in refused[0] and fingerprint(RECORD) in refused[0]
    assert _git(repo, "log", "--oneline").count("\n") == 1
