"""SIGTERM to a grid whose cells train in parallel (compare.workers=2, real submitit jobs, real
training): exit 75, one line whose command continues the grid, each running cell checkpointed
mid-epoch; that command then ends the grid with every cell's results equal to those of the
same grid run through without a stop, one cell after another."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY, TINY_DECODERS

from captioning.checkpoint import read_checkpoint
from captioning.errors import FAULT_EXIT

pytest.importorskip("submitit")
ROOT = Path(__file__).resolve().parents[1]
# Loaded by every Python process of the grid (its jobs too) through PYTHONPATH: each training
# step writes the step it trains to SLOW_STEPS_DIR/<pid>.step, and steps after the 5th take
# 0.3 s more, time for the test to stop the grid mid-epoch.
SLOW_STEPS = '''
import os
if os.environ.get("SLOW_STEPS_DIR"):
    import time
    from pathlib import Path
    from captioning.lit.module import CaptioningModule
    step = CaptioningModule.training_step

    def slow_step(self, batch, batch_idx):
        Path(os.environ["SLOW_STEPS_DIR"], f"{os.getpid()}.step").write_text(str(self.trainer.global_step))
        if self.trainer.global_step > 5:
            time.sleep(0.3)
        return step(self, batch, batch_idx)

    CaptioningModule.training_step = slow_step
'''
GRID = ["experiment=cross_modal_quick", "compare.seeds=[0]", "compare.dims=[matched]",
        "compare.blind=false", "compare.benchmark=false", "compare.bootstrap_samples=20",
        "trainer.num_threads=1", "trainer.max_epochs=2", "checkpoint.every_n_steps=0",
        *[o for o in TINY if not o.startswith("trainer.max_epochs")],
        *[f"decoder.{k}={v}" for k, v in TINY_DECODERS["lstm"].items()]]


def _grid(root: Path, data: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "scripts/compare.py", *GRID, f"paths.data_dir={data}",
         f"compare.root={root}", *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "WANDB_MODE": "disabled", **(env or {})})


def _cells(root: Path) -> dict[str, dict]:
    """Each finished cell's results, by its directory's name, without its timings."""
    found = {}
    for f in sorted(root.glob("cross_modal_quick/cells/*/results.json")):
        r = json.loads(f.read_text())
        found[f.parent.name] = {k: v for k, v in r.items() if k.startswith(("test/", "val"))
                                or k in ("best_score", "best_epoch", "epochs_trained")}
    return found


@pytest.mark.skipif(sys.platform != "linux", reason="signals to process trees, read from /proc")
def test_sigterm_to_a_parallel_grid_checkpoints_its_cells_and_its_command_continues_it(tmp_path):
    data, steps, site = tmp_path / "data", tmp_path / "steps", tmp_path / "site"
    steps.mkdir()
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_STEPS)

    whole = _grid(tmp_path / "whole", data)  # the same grid, one cell after another, no stop
    out, _ = whole.communicate(timeout=600)
    assert whole.returncode == 0, out[-3000:]
    expected = _cells(tmp_path / "whole")
    assert len(expected) == 2

    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "SLOW_STEPS_DIR": str(steps)}
    root = tmp_path / "stopped"
    grid = _grid(root, data, "compare.workers=2", env=env)
    deadline = time.time() + 300
    while len([f for f in steps.glob("*.step") if int(f.read_text() or 0) >= 8]) < 2:
        assert grid.poll() is None, grid.communicate()[0][-3000:]
        assert time.time() < deadline, "the cells never reached step 8"
        time.sleep(0.05)
    grid.send_signal(signal.SIGTERM)  # both cells mid-epoch 0 (24 steps an epoch)
    out, _ = grid.communicate(timeout=300)
    assert grid.returncode == FAULT_EXIT, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    (line,) = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert out.rstrip().endswith(line) and "grid stopped: SIGTERM received" in line
    for ckpt in root.glob("cross_modal_quick/cells/*/checkpoints/last.ckpt"):
        assert 8 <= read_checkpoint(ckpt)["global_step"] < 24  # written by the stop, mid-epoch
    assert len(list(root.glob("cross_modal_quick/cells/*/checkpoints/last.ckpt"))) == 2
    assert _cells(root) == {}

    command = shlex.split(line.split("continue with: ", 1)[1])
    assert command[:2] == ["python", "scripts/compare.py"]
    again = subprocess.run([sys.executable, *command[1:]], cwd=ROOT, capture_output=True,
                           text=True, env={**os.environ, "WANDB_MODE": "disabled"}, timeout=600)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert _cells(root) == expected
    assert all(json.loads(f.read_text())["resumed"] == 1
               for f in root.glob("cross_modal_quick/cells/*/results.json"))
