"""A new attention mode is one file: a copy of additive.py under a new registered name, and
nothing else, is an `attention=` option that `--help` lists, with its settings, and that trains."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import TINY, TINY_DECODERS

ROOT = Path(__file__).resolve().parents[1]


def test_a_copied_mode_file_is_an_option_that_trains(tmp_path, data_dir):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "captioning", repo / "captioning", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "conf", repo / "conf")
    shutil.copy(ROOT / "train.py", repo / "train.py")
    modes = repo / "captioning" / "models" / "attention"
    source = (modes / "additive.py").read_text()
    assert source.count('@register("additive")') == 1
    copy = source.replace('@register("additive")', '@register("bahdanau_copy")')
    (modes / "bahdanau_copy.py").write_text(copy)
    env = {**os.environ, "PYTHONPATH": str(repo), "HYDRA_FULL_ERROR": "1"}

    shown = subprocess.run([sys.executable, "train.py", "--help"], cwd=repo, env=env,
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert re.search(r"^attention: .*\bbahdanau_copy\b", shown.stdout, re.M), shown.stdout[:2000]

    run = tmp_path / "run"
    tiny = [f"decoder.{k}={v}" for k, v in TINY_DECODERS["lstm"].items()]
    trained = subprocess.run(
        [sys.executable, "train.py", "attention=bahdanau_copy", "attention.attn_dim=32", "debug=fast",
         *TINY, *tiny, "trainer.max_epochs=1", f"paths.data_dir={data_dir}", f"hydra.run.dir={run}"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    results = json.loads((run / "results.json").read_text())
    assert "test/bleu4" in results
    config = (run / ".hydra" / "config.yaml").read_text()
    assert re.search(r"^attention:\n  name: bahdanau_copy\n  attn_dim: 32\n  init: default$", config, re.M)
