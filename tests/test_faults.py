"""Faults in the middle of a run end with one line: what happened (the path, the error's
meaning, the space needed), the last good checkpoint and the command that continues the run; no
traceback (unless HYDRA_FULL_ERROR=1), exit status 75, nothing half-written left in place; and
the run continued by that command ends as the uninterrupted one does."""

from __future__ import annotations

import errno
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from captioning.checkpoint import read_checkpoint
from captioning.data.store import FeatureStore, LazyFeatures, StoreChanged
from captioning.errors import FAULT_EXIT
from captioning.lit.faults import describe

DRIVER = Path(__file__).with_name("fault_driver.py")
# Two epochs of 24 steps (96 images, batch 4); last.ckpt every 5 steps.
RUN = ["trainer.max_epochs=2", "checkpoint.every_n_steps=5", "decode.beam_size=1"]


def _start(out: Path, data: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(DRIVER), str(out), str(data), *RUN, *extra],
                            env={**os.environ, "WANDB_MODE": "disabled", **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(out: Path, data: Path, *extra: str, env: dict | None = None) -> tuple[int, str]:
    proc = _start(out, data, *extra, env=env)
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def _fault_line(err: str) -> str:
    """The run's last stderr line; it must be the only one that says error, and no traceback."""
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err[-3000:]
    return errors[0]


def _test_metrics(run: Path) -> dict:
    results = json.loads((run / "results.json").read_text())
    return {k: v for k, v in results.items() if k.startswith("test/")}


def _resume_overrides(line: str) -> list[str]:
    """The overrides of the command the line says continues the run."""
    command = shlex.split(line.split("continue with: ", 1)[1])
    assert command[:2] == ["python", "train.py"]
    return command[2:]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fault_data")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data) -> Path:
    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    code, err = _run(run, data)
    assert code == 0, err[-3000:]
    return run


def test_a_full_disk_at_a_checkpoint_stops_in_one_line_and_resumes_exactly(uninterrupted, data, tmp_path):
    run = tmp_path / "run"
    code, err = _run(run, data, env={"DISK_FULL_AT_STEP": "20"})
    assert code == FAULT_EXIT, err[-3000:]
    line = _fault_line(err)
    ckpt = run / "checkpoints" / "last.ckpt"
    assert f"could not write {ckpt}: no space left on the device (ENOSPC)" in line
    assert "it needs about" in line and "MiB free there" in line
    assert f"Last good checkpoint: {run / 'checkpoints' / 'last.ckpt'} (epoch 0, step 15)" in line
    assert not list((run / "checkpoints").glob("*.tmp"))  # nothing half-written left in place
    assert not (run / "results.json").exists()
    overrides = _resume_overrides(line)
    assert overrides[-1] == f"resume={run}"
    # space freed: the printed command continues the run, which ends as the uninterrupted one
    code, err = _run(tmp_path / "again", data, *overrides)
    assert code == 0, err[-3000:]
    assert json.loads((run / "results.json").read_text())["resumed"] == 1
    assert _test_metrics(run) == _test_metrics(uninterrupted)


def test_the_traceback_is_there_when_asked_for(data, tmp_path):
    code, err = _run(tmp_path / "run", data, env={"DISK_FULL_AT_STEP": "0", "HYDRA_FULL_ERROR": "1"})
    assert code != 0 and "Traceback" in err and "RunFault" in err and "No space left" in err


def _when(proc: subprocess.Popen, ready, what: str) -> None:
    deadline = time.time() + 300
    while not ready():
        assert proc.poll() is None, f"finished before {what}: " + proc.communicate()[1][-2000:]
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc for the worker's pid")
def test_a_killed_loader_worker_is_named_with_what_to_try(data, tmp_path):
    """SIGKILL to the data-loading worker (what the out-of-memory killer sends)."""
    run = tmp_path / "run"
    proc = _start(run, data, "data.num_workers=1", env={"SLOW_AFTER_STEP": "5"})
    _when(proc, lambda: (run / "checkpoints" / "last.ckpt").exists() and _children(proc.pid),
          "the first checkpoint")
    worker = _children(proc.pid)[0]
    os.kill(worker, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == FAULT_EXIT, err[-3000:]
    line = _fault_line(err)
    # (torch reports the signal when its handler sees the death first, else "exited unexpectedly")
    assert (f"a data-loading worker (pid {worker}) was killed by SIGKILL" in line
            or f"a data-loading worker (pid {worker}) exited unexpectedly (killed by the system" in line)
    assert "out-of-memory" in line and "data.num_workers=0" in line and f"resume={run}" in line


def test_a_store_shrunk_under_the_run_is_named(tmp_path):
    """The feature store's file truncated while the run reads it (its own data dir: the store
    is rebuilt by the next run, as the line says)."""
    data, run = tmp_path / "data", tmp_path / "run"
    proc = _start(run, data, env={"SLOW_AFTER_STEP": "5"})
    _when(proc, lambda: (run / "checkpoints" / "last.ckpt").exists(), "the first checkpoint")
    (store,) = data.glob("cache/store_*/features.npy")
    os.truncate(store, 4096)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == FAULT_EXIT, err[-3000:]
    line = _fault_line(err)
    assert f"the feature store file {store} shrank" in line and "rebuilds the store" in line


def _store(tmp_path: Path) -> LazyFeatures:
    store = FeatureStore.open_or_create(tmp_path / "s", {"x": 1}, rows=4, cells=2, dim=3)
    store.write(0, np.ones((4, 2, 3), np.float16), [""] * 4)
    return store.features()


def test_a_store_file_deleted_or_replaced_is_named(tmp_path):
    feats = _store(tmp_path)
    assert feats[1].shape == (2, 3)
    os.replace(feats.path, tmp_path / "moved.npy")
    with pytest.raises(StoreChanged, match="is gone"):
        feats[0]
    np.save(feats.path, np.zeros((4, 2, 3), np.float16))  # another file under the name
    with pytest.raises(StoreChanged, match="was replaced"):
        feats[0]
    assert "the next run rebuilds the store" in describe(StoreChanged(f"the feature store file {feats.path} "
                                                                      "was replaced"))


def test_a_store_that_cannot_get_its_space_says_how_much(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError) as err:
        FeatureStore.open_or_create(tmp_path / "s", {"x": 1}, rows=1000, cells=16, dim=512)
    assert err.value.filename == str(tmp_path / "s" / "features.npy")
    assert err.value.needed_bytes >= 1000 * 16 * 512 * 2
    assert not (tmp_path / "s" / "features.npy").exists()  # no store a later run would take
    line = describe(err.value)
    assert line.startswith(f"could not write {tmp_path / 's' / 'features.npy'}: no space left")
    assert "it needs about 16 MiB" in line


def test_only_faults_of_the_surroundings_are_reworded():
    assert describe(ValueError("a bug")) is None
    assert describe(FileNotFoundError(errno.ENOENT, "gone", "x")) is None
    try:
        try:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        except OSError as cause:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos") from cause
    except RuntimeError as err:
        assert describe(err).startswith("could not write a file of the run: the disk quota is exceeded")
    exited = RuntimeError("DataLoader worker (pid(s) 4242) exited unexpectedly")
    assert describe(exited).startswith("a data-loading worker (pid 4242) exited unexpectedly")
    bus = RuntimeError("DataLoader worker (pid 7) is killed by signal: Bus error. ")
    assert "shrank or vanished" in describe(bus)


def test_a_worker_killed_while_it_hands_a_batch_over_is_named():
    """Killed mid-transfer, a worker leaves the training process a broken connection (its
    tensors come through a socket) instead of torch's worker message: the loader iterator in the
    traceback names the worker that died. A broken connection elsewhere is no such fault."""
    from types import SimpleNamespace

    class Iterator:  # what torch's multiprocessing loader iterator holds: its worker processes
        _workers = [SimpleNamespace(pid=11, exitcode=None), SimpleNamespace(pid=12, exitcode=-signal.SIGKILL)]

        def next_batch(self):
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    try:
        Iterator().next_batch()
    except ConnectionResetError as err:
        line = describe(err)
    assert line.startswith("a data-loading worker (pid 12) was killed by SIGKILL")
    assert "data.num_workers=0" in line
    assert describe(ConnectionResetError(errno.ECONNRESET, "reset")) is None


def test_sigterm_mid_epoch_checkpoints_where_it_stands_and_resumes_exactly(uninterrupted, data, tmp_path):
    """SIGTERM (no step checkpoints: the one written is the signal's): exit 75, one line with
    the step and the resume command, and the resumed run ends as the uninterrupted one."""
    run, step = tmp_path / "run", tmp_path / "run.step"
    proc = _start(run, data, "checkpoint.every_n_steps=0", env={"SLOW_AFTER_STEP": "5"})
    _when(proc, lambda: step.exists() and int(step.read_text() or 0) >= 8, "step 8")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == FAULT_EXIT, err[-3000:]
    line = _fault_line(err)
    written = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert 8 <= written["global_step"] < 24  # mid-epoch 0: only the signal wrote it
    assert "SIGTERM received" in line
    assert f"{run / 'checkpoints' / 'last.ckpt'} (epoch 0, step {written['global_step']})" in line
    code, err = _run(tmp_path / "again", data, *_resume_overrides(line))
    assert code == 0, err[-3000:]
    assert _test_metrics(run) == _test_metrics(uninterrupted)
    assert json.loads((run / "results.json").read_text())["val_curve"] == \
        json.loads((uninterrupted / "results.json").read_text())["val_curve"]


def test_a_cell_of_a_grid_is_continued_by_the_grids_own_command(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from hydra.core.hydra_config import HydraConfig

    from captioning.lit import faults

    def hydra(name: str, task: list[str]):
        return lambda: SimpleNamespace(job=SimpleNamespace(config_name=name),
                                       overrides=SimpleNamespace(task=task))

    monkeypatch.setattr(HydraConfig, "get", hydra("compare", ["experiment=cross_modal_quick"]))
    assert faults.continue_command(tmp_path) == "python scripts/compare.py experiment=cross_modal_quick"
    monkeypatch.setattr(HydraConfig, "get", hydra("train", ["attention=dot", "resume=old"]))
    assert faults.continue_command(tmp_path) == f"python train.py attention=dot resume={tmp_path}"


def test_a_write_without_a_file_name_is_named_from_its_file_object(tmp_path):
    """A flush or close that fails (a logger's metrics file on a full disk: fsspec raises
    ENOSPC without a file name) is named by the file object it failed in."""
    import errno

    from captioning.lit.faults import describe

    class MetricsFile:  # as fsspec's local file: it knows its path, its OSError does not
        def __init__(self, path: str) -> None:
            self.path = path

        def write(self, data: str) -> None: ...

        def flush(self) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "csv" / "metrics.csv"
    target.parent.mkdir()
    with pytest.raises(OSError) as failed:
        MetricsFile(str(target)).flush()
    line = describe(failed.value)
    assert line.startswith(f"could not write {target}: no space left on the device (ENOSPC)")
    assert "free there" in line
    copied = tmp_path / "media" / "table.json"

    def copyfile(src: str, dst: str) -> None:  # as shutil's: the target is its `dst`
        raise OSError(errno.ENOSPC, "No space left on device")

    class Media:  # a logger's media object: it has a path (its source), but writes nothing itself
        path = str(tmp_path / "source.json")

        def save(self) -> None:
            copyfile(self.path, str(copied))

    with pytest.raises(OSError) as failed_copy:
        Media().save()
    assert describe(failed_copy.value).startswith(f"could not write {copied}: ")
    # a copy that names both files (shutil.move of a logger's media into the run): the target
    moved = OSError(errno.ENOSPC, "No space left on device", "/tmp/media.json", None, str(copied))
    assert describe(moved).startswith(f"could not write {copied}: ")
    with pytest.raises(OSError) as nameless:  # and with no file object at all: said so
        raise OSError(errno.ENOSPC, "No space left on device")
    assert describe(nameless.value).startswith("could not write a file of the run")
