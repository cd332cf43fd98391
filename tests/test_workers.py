"""compare.workers: cells in parallel on one machine through submitit's local executor, each
in its own process, on its own GPU or its share of the cores; a failing or killed cell is named
and the others go on."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from captioning.compare.cells import Cell
from captioning.compare.workers import Progress, run_parallel, threads_per_cell
from captioning.errors import RunFault, UserError

pytest.importorskip("submitit")
TESTS = str(Path(__file__).resolve().parent)


def _todo(tmp_path: Path, specs: list[dict]) -> list:
    return [(Cell("lstm", "matched", "additive", k), OmegaConf.create({"trainer": {"num_threads": 1}, **s}),
             tmp_path / f"cell{k}") for k, s in enumerate(specs)]


@pytest.fixture
def jobs(monkeypatch):
    from worker_jobs import record_cell  # noqa: F401  (importable here and in the jobs)

    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    import worker_jobs

    return worker_jobs.record_cell


def _read(tmp_path: Path, k: int) -> dict:
    return json.loads((tmp_path / f"cell{k}" / "results.json").read_text())


def test_two_workers_on_two_gpus_each_see_their_own(tmp_path, jobs):
    """Four cells, two workers, two (simulated) GPUs: never more than two at once, and the two
    at once see different devices."""
    failed = run_parallel(_todo(tmp_path, [{}] * 4), 2, tmp_path / "sub", gpus=2, job=jobs)
    assert failed == []
    runs = [_read(tmp_path, k) for k in range(4)]
    assert {r["gpus"] for r in runs} == {"0", "1"} and len({r["pid"] for r in runs}) == 4
    for a in runs:
        together = [b for b in runs if b is not a and b["start"] < a["end"] and a["start"] < b["end"]]
        assert len(together) <= 1  # two workers: at most one other cell at a time
        assert all(b["gpus"] != a["gpus"] for b in together)
    assert any(b["start"] < runs[0]["end"] for b in runs[1:])  # they did run at once


def test_each_cell_job_writes_its_own_train_log(tmp_path, jobs):
    """A worker's job process has no log handler of its own: the cell's epoch lines go to
    <cell>/train.log (INFO and above), and the job leaves no handler behind."""
    import worker_jobs

    from captioning.compare.cell_log import last_epoch

    failed = run_parallel(_todo(tmp_path, [{}, {}]), 2, tmp_path / "sub", job=worker_jobs.logging_cell)
    assert failed == []
    for k in range(2):
        text = (tmp_path / f"cell{k}" / "train.log").read_text()
        assert "[captioning.lit.console][INFO] - epoch 1/3: val/bleu4 0.4100 (new best)" in text
        assert "a debug line" not in text
        line = "epoch 1/3: val/bleu4 0.4100 (new best), val/attr_acc 0.611, 38 s"
        assert last_epoch(tmp_path / f"cell{k}") == line


def test_a_broken_or_killed_cell_is_named_and_the_others_finish(tmp_path, jobs):
    specs = [{}, {"broken": "attention.nonsense=1"}, {"die": True}, {}]
    failed = run_parallel(_todo(tmp_path, specs), 2, tmp_path / "sub", gpus=0, job=jobs)
    assert len(failed) == 2
    assert failed[0].startswith("lstm/matched/additive/s1: ") and "broken setting" in failed[0]
    assert failed[1].startswith("lstm/matched/additive/s2: its process died") and "(log: " in failed[1]
    assert Path(failed[1].split("(log: ")[1].rstrip(")")).is_file()
    assert [(tmp_path / f"cell{k}" / "results.json").exists() for k in range(4)] == [True, False, False, True]
    assert _read(tmp_path, 0)["threads"] == "1"  # the config's own thread count, in the job's env


def test_a_job_continues_a_run_killed_in_its_cell_after_the_job_was_prepared(tmp_path, monkeypatch):
    """Whether a cell resumes is decided again under its lock: a checkpoint left by another
    process killed there after the grid prepared the job is continued, not trained over."""
    import captioning.lit as lit
    from captioning.compare import workers

    seen = []
    monkeypatch.setattr(workers, "_stop_as_a_run_does", lambda: None)  # not this test process's
    monkeypatch.setattr(lit, "train", lambda cfg: seen.append(cfg.get("resume")))
    fresh, killed = tmp_path / "fresh", tmp_path / "killed"
    fresh.mkdir()
    (killed / "checkpoints").mkdir(parents=True)
    (killed / "checkpoints" / "last.ckpt").write_bytes(b"")
    for out in (fresh, killed):
        cfg = OmegaConf.create({"trainer": {"num_threads": 1}})
        OmegaConf.set_struct(cfg, True)  # a composed config: new keys only through open_dict
        assert workers.cell_job(cfg, out) == "trained"
    assert seen == [None, str(killed)]


def test_workers_never_run_more_threads_than_cores():
    cfgs = [OmegaConf.create({"trainer": {"num_threads": 2}})]
    assert threads_per_cell(cfgs, 2, cores=4) == 2
    with pytest.raises(UserError, match="lower compare.workers to 1"):
        threads_per_cell(cfgs, 2, cores=2)
    free = [OmegaConf.create({"trainer": {"num_threads": None}})]
    assert threads_per_cell(free, 2, cores=8) == 4  # a share of the cores where the config leaves it


def test_the_progress_line_counts_and_estimates():
    p = Progress(total=10, done=4, times=[60.0, 60.0])
    assert p.line(running=2, left=4, workers=2) == "grid: 4/10 done, 2 running, 4 left, 0 failed; ETA 3 min"
    # under a plan the cells it may start now are more than a sweep's choices may need
    p.decided = False
    assert p.line(running=2, left=4, workers=2) == ("grid: 4/10 done, 2 running, up to 4 left, 0 failed; "
                                                    "ETA at most 3 min")


def test_only_a_cell_trained_whole_here_times_the_estimate():
    """A resumed cell's last part, or a cell another process finished, counts as done but
    gives no cell's time: the ETA would come out short."""
    p = Progress(total=4)
    p.ended("trained", 600.0, resumed=True)
    p.ended("was finished by another process meanwhile", 1.0, resumed=False)
    assert (p.done, p.times) == (2, [])
    assert p.line(running=1, left=1, workers=1).endswith("0 failed")  # no ETA from no time
    p.ended("trained", 3000.0, resumed=False)
    assert (p.done, p.times) == (3, [3000.0])
    assert p.line(running=1, left=0, workers=1).endswith("; ETA 50 min")


def test_a_failed_cells_line_carries_the_problems_its_error_lists():
    """A config refused inside a cell lists its problems under the error's first line: the
    grid's one line per failed cell names them, not only "bad config"."""
    from captioning.compare.executor import what_failed

    err = RuntimeError("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                       "captioning.lit.config_check.ConfigError: bad config (nothing was started):\n"
                       "  - optim.optimizer.lr=-1.0: must be > 0\n")
    assert what_failed(err) == ("captioning.lit.config_check.ConfigError: bad config (nothing was "
                                 "started): - optim.optimizer.lr=-1.0: must be > 0")
    assert what_failed(RuntimeError("Traceback\nValueError: boom\n")) == "ValueError: boom"


def _started(cell: Path) -> int:
    """The pid of a before_training_cell once it has started (waits up to 2 minutes)."""
    deadline = time.time() + 120
    while not (cell / "started").exists() or not (cell / "started").read_text():
        assert time.time() < deadline, "the cell never started"
        time.sleep(0.1)
    return int((cell / "started").read_text())


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped, counts as dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def _in_background(fn) -> None:
    threading.Thread(target=fn, daemon=True).start()


@pytest.fixture
def slow_cell(tmp_path, monkeypatch):
    """(compare.workers' own cell job around a 60-s stand-in for what precedes training, a
    one-cell grid of it)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(TESTS)
    import worker_jobs

    return worker_jobs.before_training_cell, _todo(tmp_path, [{"sleep": 60}, {"sleep": 60}])


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc for the cell's state")
def test_sigterm_before_a_cell_trains_stops_it_too(tmp_path, slow_cell):
    """submitit's job process ignores SIGTERM; a cell's job takes the default back, so a stop
    that comes before its first step (while it composes or reads the store) ends it too,
    instead of the grid saying it stopped while the cell trains on."""
    job, todo = slow_cell
    cell = todo[0][2]
    pid: list[int] = []

    def stop() -> None:
        pid.append(_started(cell))
        os.kill(os.getpid(), signal.SIGTERM)  # to the grid: run_parallel's handler by now

    def hung(signum, frame):
        raise TimeoutError("the grid did not end after its stop")

    _in_background(stop)
    began, previous = time.time(), signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)  # a grid that waits forever on its queue fails here instead of hanging
    try:
        # one worker, two cells: the second is still queued when the stop comes, and never starts
        with pytest.raises(RunFault, match="grid stopped: SIGTERM received.*continue with: "):
            run_parallel(todo, 1, tmp_path / "sub", gpus=0, job=job)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert time.time() - began < 50 and _gone_within(pid[0], 10)
    assert not (cell / "results.json").exists() and not (todo[1][2] / "started").exists()


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc for the cell's parent")
def test_a_killed_job_controller_takes_its_cell_with_it(tmp_path, slow_cell):
    """kill -9 of the process submitit starts for a job (the cell's parent): the cell stops
    too, and the grid names it as died, never counting as failed a cell that trains on."""
    job, todo = slow_cell
    cell = todo[0][2]
    pid: list[int] = []

    def kill_its_parent() -> None:
        pid.append(_started(cell))
        parent = int(Path(f"/proc/{pid[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(parent, signal.SIGKILL)

    _in_background(kill_its_parent)
    failed = run_parallel(todo[:1], 1, tmp_path / "sub", gpus=0, job=job)
    assert len(failed) == 1 and "its process died" in failed[0]
    assert _gone_within(pid[0], 10)
    assert not (cell / "results.json").exists()
