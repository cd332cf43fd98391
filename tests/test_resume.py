"""Nothing lost: a run killed with SIGKILL (mid-epoch, or in the middle of a checkpoint write)
and resumed trains on exactly the batches the uninterrupted run trains on and ends with
bitwise-equal weights and equal test metrics (CPU, same machine)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from captioning.checkpoint import read_checkpoint

DRIVER = Path(__file__).with_name("resume_driver.py")
# Two epochs of 24 steps (96 images, batch 4), dropout 0.3, shuffled; last.ckpt every 5 steps.
RUN = ["trainer.max_epochs=2", "checkpoint.every_n_steps=5", "decode.beam_size=1"]


def _start(out: Path, data: Path, log: Path, *extra: str, env: dict | None = None,
           torchrun: bool = False):
    """The driver in its own process group (torchrun: its agent and 2 CPU workers, DDP/gloo)."""
    launcher = ([str(Path(sys.executable).with_name("torchrun")), "--standalone",
                 "--nproc_per_node", "2"] if torchrun else [sys.executable])
    ddp = ["trainer=ddp", "trainer.accelerator=cpu"] if torchrun else []
    return subprocess.Popen(
        [*launcher, str(DRIVER), str(out), str(data), str(log), *RUN, *ddp, *extra],
        env={**os.environ, **({"OMP_NUM_THREADS": "1"} if torchrun else {}), **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _finish(proc) -> str:
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-3000:]
    return output


def _kill_when(proc, ready, what: str) -> None:
    deadline = time.time() + 300
    while not ready():
        assert proc.poll() is None, f"finished before {what}: " + proc.communicate()[0][-2000:]
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole group: a torchrun agent and its workers
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _steps(log: Path) -> tuple[dict[tuple[int, int], list], list[tuple[int, int]]]:
    """({(rank, step): images}, (rank, step)s trained again after a resume on other images
    than the first time): the steps between the last checkpoint and the kill are replayed."""
    seen: dict[tuple[int, int], list] = {}
    replayed_differently = []
    for line in log.read_text().splitlines():
        row = json.loads(line)
        key = (row["rank"], row["step"])
        if seen.setdefault(key, row["images"]) != row["images"]:
            replayed_differently.append(key)
    return seen, replayed_differently


def _last_step(log: Path) -> int:
    return max((json.loads(x)["step"] for x in log.read_text().splitlines()), default=-1)


def differences(reference: Path, resumed: Path) -> list[str]:
    """What differs between two finished runs (each dir holds steps.jsonl and run/)."""
    out = []
    (a, _), (b, replays) = _steps(reference / "steps.jsonl"), _steps(resumed / "steps.jsonl")
    if bad := sorted({k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} | set(replays)):
        out.append(f"batches differ at steps {bad[:10]}")
    wa = read_checkpoint(reference / "run" / "checkpoints" / "last.ckpt")["state_dict"]
    wb = read_checkpoint(resumed / "run" / "checkpoints" / "last.ckpt")["state_dict"]
    if diff := [k for k in wa if not torch.equal(wa[k], wb[k])]:
        out.append(f"weights differ: {diff[:5]}")
    ra = json.loads((reference / "run" / "results.json").read_text())
    rb = json.loads((resumed / "run" / "results.json").read_text())
    metrics = [k for k in ra if k.startswith("test/")]
    if diff := [k for k in metrics if ra[k] != rb[k]]:
        out.append(f"test metrics differ: {diff}")
    if ra["val_curve"] != rb["val_curve"]:  # the learning curve continues the killed run's
        out.append(f"validation curves differ: {ra['val_curve']} vs {rb['val_curve']}")
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data_dir) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted")
    _finish(_start(root / "run", data_dir, root / "steps.jsonl"))
    return root


@pytest.fixture(scope="module")
def killed_mid_epoch(tmp_path_factory, data_dir, uninterrupted) -> Path:
    """Killed in epoch 2 (step >= 30 of 48), after at least one step checkpoint of that epoch."""
    root = tmp_path_factory.mktemp("killed")
    log = root / "steps.jsonl"
    proc = _start(root / "run", data_dir, log, env={"SLOW_AFTER_STEP": "28"})
    _kill_when(proc, lambda: log.exists() and _last_step(log) >= 31, "step 31")
    assert read_checkpoint(root / "run" / "checkpoints" / "last.ckpt")["global_step"] == 30
    return root


def test_killed_mid_epoch_resumes_exactly(killed_mid_epoch, uninterrupted, data_dir, tmp_path):
    resumed = tmp_path / "resumed"
    shutil.copytree(killed_mid_epoch, resumed)
    began = time.time()
    output = _finish(_start(tmp_path / "fresh", data_dir, resumed / "steps.jsonl",
                            f"resume={resumed / 'run'}"))
    resumed_part_s = time.time() - began
    assert differences(uninterrupted, resumed) == []
    # Lightning's warning that a mid-epoch checkpoint cannot resume the dataloader does not
    # apply (the DataModule restores the sampler's position): not shown
    assert "dataloader is not resumable" not in output
    results = json.loads((resumed / "run" / "results.json").read_text())
    assert results["resumed"] == 1
    assert (resumed / "run" / "run.json").is_file()
    assert results["machines"] == [results["machine"]] * 2  # the killed part's and the resumed part's
    assert results["commits"] == [results["git_commit"]] * 2  # and each part's code
    # its cost counts the killed part too (up to that part's last checkpoint)
    assert 0 < results["cpu_s_earlier_parts"] < results["cpu_s"]
    assert json.loads((uninterrupted / "run" / "results.json").read_text())["cpu_s_earlier_parts"] == 0
    # and so does its wall time: the killed part's, plus this part's own (not the time between)
    assert 0 < results["wall_time_s_earlier_parts"] < results["wall_time_s"]
    assert results["wall_time_s"] - results["wall_time_s_earlier_parts"] <= resumed_part_s


def test_negative_control_resume_without_loader_position_differs(
        killed_mid_epoch, uninterrupted, data_dir, tmp_path):
    """The same resume without restoring the loader's position: the batch check catches it."""
    resumed = tmp_path / "forgetful"
    shutil.copytree(killed_mid_epoch, resumed)
    _finish(_start(tmp_path / "fresh", data_dir, resumed / "steps.jsonl",
                   f"resume={resumed / 'run'}", env={"NO_POSITION_RESTORE": "1"}))
    problems = differences(uninterrupted, resumed)
    assert any(p.startswith("batches differ") for p in problems), problems


# The plateau rule steps once per epoch, after the epoch's validation; the epoch-end
# checkpoint is written before that step (Lightning steps plateau schedulers after the
# checkpoint callbacks and never on a restart). Here every validation after the first halves
# the rate (the driver's PLATEAU_NEVER_IMPROVES), so a lost step shows in the rates.
PLATEAU = ["trainer.max_epochs=3", "checkpoint.every_n_steps=0", "schedule=warmup_plateau",
           "optim.scheduler.warmup_steps=4", "optim.scheduler.patience=0"]
NEVER = {"PLATEAU_NEVER_IMPROVES": "1"}


@pytest.fixture(scope="module")
def plateau_uninterrupted(tmp_path_factory, data_dir) -> Path:
    root = tmp_path_factory.mktemp("plateau_uninterrupted")
    _finish(_start(root / "run", data_dir, root / "steps.jsonl", *PLATEAU, env=NEVER))
    curve = json.loads((root / "run" / "results.json").read_text())["val_curve"]
    assert [e["lr"] for e in curve] == pytest.approx([0.005, 0.005, 0.0025])  # one halving
    return root


@pytest.fixture(scope="module")
def plateau_killed(tmp_path_factory, data_dir) -> Path:
    """Killed in epoch 2 (step >= 27 of 72), its last checkpoint epoch 1's end."""
    root = tmp_path_factory.mktemp("plateau_killed")
    log = root / "steps.jsonl"
    proc = _start(root / "run", data_dir, log, *PLATEAU, env={**NEVER, "SLOW_AFTER_STEP": "24"})
    _kill_when(proc, lambda: log.exists() and _last_step(log) >= 27, "step 27")
    assert read_checkpoint(root / "run" / "checkpoints" / "last.ckpt")["global_step"] == 24
    return root


@pytest.mark.parametrize("catch_up", [True, False], ids=["resumed", "negative-control"])
def test_killed_after_an_epoch_end_resumes_the_plateau_rule_exactly(
        catch_up, plateau_uninterrupted, plateau_killed, data_dir, tmp_path):
    """Resumed from epoch 1's end: the plateau step that epoch 1's validation called for is
    taken on resume, as the uninterrupted run took it; without it (the negative control) the
    rule works from a stale best and the halving comes one epoch late."""
    resumed = tmp_path / "resumed"
    shutil.copytree(plateau_killed, resumed)
    _finish(_start(tmp_path / "fresh", data_dir, resumed / "steps.jsonl", *PLATEAU,
                   f"resume={resumed / 'run'}",
                   env=NEVER if catch_up else {**NEVER, "NO_PLATEAU_CATCH_UP": "1"}))
    problems = differences(plateau_uninterrupted, resumed)
    if catch_up:
        assert problems == []
    else:
        assert any(p.startswith("validation curves differ") for p in problems), problems


def test_killed_during_a_checkpoint_write_keeps_the_previous_one(
        uninterrupted, data_dir, tmp_path):
    """And resume=auto finds the run: the newest under <log_dir>/train/ with this config's hash."""
    logs = tmp_path / "logs"
    run, log = logs / "train" / "runs" / "killed", tmp_path / "steps.jsonl"
    proc = _start(run, data_dir, log, f"paths.log_dir={logs}", env={"HANG_IN_SAVE_AT_STEP": "20"})
    _kill_when(proc, lambda: Path(str(log) + ".saving").exists(), "the step-20 checkpoint write")
    checkpoints = run / "checkpoints"
    assert read_checkpoint(checkpoints / "last.ckpt")["global_step"] == 15  # whole, the old one
    assert list(checkpoints.glob(".last.ckpt.*.tmp"))  # the half-written file never replaced it
    _finish(_start(logs / "train" / "runs" / "again", data_dir, log, f"paths.log_dir={logs}",
                   "resume=auto"))
    shutil.copy(log, run.parent / "steps.jsonl")  # differences() reads <dir>/steps.jsonl, <dir>/run
    (run.parent / "run").symlink_to(run)
    assert differences(uninterrupted, run.parent) == []


def _image_at_step(uninterrupted: Path, step: int) -> int:
    return _steps(uninterrupted / "steps.jsonl")[0][0, step][0]


def test_a_poisoned_batch_stops_the_run_and_keeps_the_last_good_checkpoint(
        uninterrupted, data_dir, tmp_path):
    poison = _image_at_step(uninterrupted, 12)  # its batch is step 12 of epoch 1 (and 2)
    proc = _start(tmp_path / "run", data_dir, tmp_path / "steps.jsonl",
                  env={"POISON_IMAGE": str(poison)})
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode != 0
    assert "non-finite loss or gradient (loss nan) at step 12, epoch 0" in output
    assert "Image ids in the batch:" in output and "resume=<run dir>" in output
    last = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 10  # the last good one, intact and loadable
    assert all(torch.isfinite(w).all() for w in last["state_dict"].values())


def test_nan_policy_skip_finishes_and_counts(uninterrupted, data_dir, tmp_path):
    poison = _image_at_step(uninterrupted, 12)
    # four epochs, not the resume tests' two: two leave a tiny run on the edge of learning at
    # all (on some CPUs and seeds it ends captioning every image alike, no better than untrained)
    _finish(_start(tmp_path / "run", data_dir, tmp_path / "steps.jsonl",
                   "trainer.nan_policy=skip", "trainer.max_epochs=4", env={"POISON_IMAGE": str(poison)}))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["nonfinite_skipped_batches"] == 4  # the image's batch in each epoch
    # It went on learning after the skipped batches: above its own untrained start (a control;
    # its distance to the clean run is no test: two short runs that differ in a few steps end up
    # far apart in BLEU-1).
    from conftest import untrained_bleu1

    assert results["test/bleu1"] > untrained_bleu1(tmp_path / "run"), results
    last = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert all(torch.isfinite(w).all() for w in last["state_dict"].values())


def test_resume_with_another_config_is_refused_with_the_keys(uninterrupted, tiny_cfg, monkeypatch):
    from captioning.lit import datamodule, train
    from captioning.lit.config_check import ConfigError

    monkeypatch.setattr(datamodule, "prepare_data", lambda *a, **k: pytest.fail("data work"))
    with pytest.raises(ConfigError, match=r"(?s)only a larger trainer.max_epochs.*"
                                          r"optim.optimizer.lr: 0.005 -> 0.001.*seed: 0 -> 1"):
        train(tiny_cfg(*RUN, f"resume={uninterrupted / 'run'}", "seed=1", "optim.optimizer.lr=1e-3"))


def test_resume_a_finished_run_with_more_epochs_replans_the_schedule(
        uninterrupted, data_dir, tmp_path):
    """The one allowed change: a larger max_epochs trains the extra epoch in the same run dir
    (and run.json), with the one-cycle schedule stretched to the new length."""
    run = tmp_path / "logs" / "train" / "runs" / "first"
    shutil.copytree(uninterrupted / "run", run)
    shutil.copy(uninterrupted / "steps.jsonl", tmp_path / "steps.jsonl")
    _finish(_start(tmp_path / "logs" / "train" / "runs" / "second", data_dir,
                   tmp_path / "steps.jsonl", f"resume={run}", "trainer.max_epochs=3"))
    steps, replays = _steps(tmp_path / "steps.jsonl")
    assert sorted(steps) == [(0, k) for k in range(72)] and replays == []
    last = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 72 and last["epoch"] == 2
    scheduler = last["lr_schedulers"][0]
    assert scheduler["total_steps"] == 72 and scheduler["last_epoch"] == 72
    assert json.loads((run / "results.json").read_text())["resumed"] == 1


def test_init_from_starts_a_new_run_from_the_weights(uninterrupted, tiny_cfg, tmp_path):
    """A new run (its own dir, step 0) from a checkpoint's weights: with a vanishing learning
    rate its weights stay those of the checkpoint; the file's content is in the config hash."""
    from captioning.lit import train
    from captioning.provenance import config_hash

    source = uninterrupted / "run" / "checkpoints" / "last.ckpt"
    cfg = tiny_cfg(*RUN, "trainer.max_epochs=1", f"init_from={source}", "optim.optimizer.lr=1e-12")
    results = train(cfg)
    start = read_checkpoint(source)["state_dict"]
    end = read_checkpoint(Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt")
    assert end["global_step"] == 24 and results["resumed"] == 0
    assert all(torch.allclose(start[k], end["state_dict"][k], atol=1e-6) for k in start)

    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=True)
    copy = tmp_path / "elsewhere.ckpt"
    shutil.copy(source, copy)
    assert config_hash({**plain, "init_from": str(copy)}) == results["config_hash"]  # content
    assert config_hash({**plain, "init_from": None}) != results["config_hash"]


def test_an_interrupted_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    """A full disk (ENOSPC) in the middle of a write: the error propagates, the previous file
    is untouched and no temp file is left."""
    import errno

    from captioning.lit.checkpoint_policy import AtomicCheckpointIO

    io = AtomicCheckpointIO()
    target = tmp_path / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "global_step": 1}, target)

    def full_disk(checkpoint, f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(AtomicCheckpointIO, "_write", staticmethod(full_disk))
    with pytest.raises(OSError, match="No space left"):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "global_step": 2}, target)
    assert read_checkpoint(target)["global_step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    from captioning.lit.checkpoint_policy import _UMASK

    assert target.stat().st_mode & 0o777 == 0o666 & ~_UMASK  # a normal file, not mkstemp's 0600


def test_a_killed_ddp_run_resumes_to_the_same_result(data_dir, tmp_path):
    """torchrun --nproc_per_node 2 (the path users take on clusters), DDP on 2 CPU processes:
    killed (agent and workers) in epoch 2 after a step checkpoint, resumed with torchrun again:
    every rank's batches, the final weights and the test metrics equal the uninterrupted run's.
    (2 x 4 images per step: 12 steps per epoch.)"""
    reference = tmp_path / "uninterrupted"
    _finish(_start(reference / "run", data_dir, reference / "steps.jsonl", torchrun=True))
    killed = tmp_path / "killed"
    log = killed / "steps.jsonl"
    killed.mkdir()
    proc = _start(killed / "run", data_dir, log, env={"SLOW_AFTER_STEP": "15"}, torchrun=True)
    _kill_when(proc, lambda: log.exists() and _last_step(log) >= 17, "step 17")
    assert read_checkpoint(killed / "run" / "checkpoints" / "last.ckpt")["global_step"] == 15
    _finish(_start(tmp_path / "fresh", data_dir, log, f"resume={killed / 'run'}", torchrun=True))
    assert differences(reference, killed) == []
    assert {rank for rank, _ in _steps(log)[0]} == {0, 1}


def test_keys_added_to_the_code_since_the_run_started_do_not_block_resume():
    """A run saved before the config gained keys (new keys default to the old behaviour) resumes
    after a `git pull`; a changed or removed key is still refused."""
    from captioning.lit.resume import config_differences

    saved = {"seed": 0, "optim": {"lr": 1.0, "scheduler": None}}
    current = {"seed": 0, "optim": {"lr": 1.0, "alpha_c": 0.0, "scheduler": None},
               "early_stopping": {"patience": None}}
    assert config_differences(saved, current) == []
    assert config_differences(saved, {**current, "seed": 1}) == ["seed: 0 -> 1"]
    assert config_differences(saved, {"seed": 0, "optim": {"scheduler": None}}) == [
        "optim.lr: 1.0 -> '<absent>'"]
