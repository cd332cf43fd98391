"""Hydra sweeps as shipped: an Optuna search (hparams_search=bleu4_optuna) whose trials' values
are their runs' own validation BLEU-4, and the one-machine launcher (hydra/launcher=local)
that runs a sweep's points in parallel, each on its share of the cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY

ROOT = Path(__file__).resolve().parents[1]
SMALL = TINY + [
    "data.synthetic.num_train=192", "trainer.max_epochs=4",
    "decoder.embed_dim=64", "decoder.hidden_dim=64", "decoder.value_dim=32",
    "attention.attn_dim=32"]


def _sweep(tmp_path: Path, data_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "MPLCONFIGDIR": str(tmp_path / "mpl")}
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", *SMALL, *overrides,
                           f"paths.log_dir={tmp_path / 'logs'}", f"paths.data_dir={data_dir}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def _runs(tmp_path: Path) -> dict[int, dict]:
    """{job number: its results.json} of the sweep under tmp_path."""
    return {int(f.parent.name): json.loads(f.read_text())
            for f in (tmp_path / "logs").glob("*/multiruns/*/*/results.json")}


def test_an_optuna_study_of_three_trials_maximises_each_runs_validation_bleu4(tmp_path, data_dir):
    optuna = pytest.importorskip("optuna")
    db = f"sqlite:///{tmp_path / 'study.db'}"
    out = _sweep(tmp_path, data_dir, "hparams_search=bleu4_optuna", "hydra.sweeper.n_trials=3",
                 f"hydra.sweeper.storage={db}", "hydra.sweeper.study_name=t")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    study = optuna.load_study(study_name="t", storage=db)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(trials) == 3
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 3  # three distinct points
    runs = _runs(tmp_path)
    assert sorted(runs) == [0, 1, 2]
    for trial in trials:
        run = runs[trial.number]
        # the value is the run's best validation BLEU-4: its checkpoint's score, the best of its
        # validation curve, never a test score
        assert trial.value == pytest.approx(run["best_score"], abs=1e-12)
        assert trial.value == pytest.approx(max(v["val/bleu4"] for v in run["val_curve"]), abs=1e-6)
        assert trial.value != run["test/bleu4"]  # the test split never steers the search


def test_the_local_launcher_runs_points_at_once_each_on_its_share_of_the_cores(tmp_path, data_dir):
    pytest.importorskip("submitit")
    out = _sweep(tmp_path, data_dir, "hydra/launcher=local", "hydra.launcher.parallelism=2", "seed=0,1")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    runs = _runs(tmp_path)
    assert sorted(runs) == [0, 1] and sorted(r["seed"] for r in runs.values()) == [0, 1]
    cores = os.cpu_count() or 1
    assert all(r["threads"] == max(1, cores // 2) for r in runs.values())  # never more than the cores
    logs = list((tmp_path / "logs").glob("*/multiruns/*/.submitit/*/*_log.err"))
    assert len(logs) == 2  # each point its own submitit job


def test_the_launcher_presets_compose():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        local = compose("train", overrides=["hydra/launcher=local"], return_hydra_config=True)
        joblib = compose("train", overrides=["hydra/launcher=local_joblib"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    assert local.hydra.launcher._target_.endswith("ParallelLocalLauncher")
    assert (local.hydra.launcher.parallelism, local.hydra.launcher.timeout_min) == (2, 10080)
    assert joblib.hydra.launcher._target_.endswith("JoblibLauncher") and joblib.hydra.launcher.n_jobs == 2


def test_the_joblib_preset_runs_a_sweep_of_two_points(tmp_path, data_dir):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    cores = os.cpu_count() or 1
    out = _sweep(tmp_path, data_dir, "hydra/launcher=local_joblib", "seed=0,1",
                 f"trainer.num_threads={max(1, cores // 2)}")
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    runs = _runs(tmp_path)
    assert sorted(r["seed"] for r in runs.values()) == [0, 1]
    assert all(r["threads"] == max(1, cores // 2) for r in runs.values())
