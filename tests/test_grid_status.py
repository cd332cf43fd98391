"""Where a grid stands without training anything (compare.status=true), and the same rows in
the grid's wandb run while its workers train."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from captioning.compare.cells import Cell
from captioning.compare.lock import LOCK, CellLock
from captioning.compare.status import GridBoard, cell_state, code_text, cost_text, grid_status, status_text

ROOT = Path(__file__).resolve().parents[1]


def _cells(tmp_path: Path) -> tuple[list[Cell], dict[Cell, Path]]:
    cells = [Cell("lstm", "matched", "additive", k) for k in range(5)]
    dirs = {c: tmp_path / f"cell{c.seed}" for c in cells}
    for d in dirs.values():
        d.mkdir()
    (dirs[cells[0]] / "results.json").write_text(json.dumps(
        {"test/bleu4": 0.5, "best_score": 0.48, "wall_time_s": 600.0, "cpu_s": 1200.0,
         "machine": "AMD EPYC"}))
    (dirs[cells[2]] / "checkpoints").mkdir()
    (dirs[cells[2]] / "checkpoints" / "last.ckpt").write_bytes(b"")
    return cells, dirs


def test_each_state_read_from_the_folder_alone(tmp_path):
    cells, dirs = _cells(tmp_path)
    lock = CellLock(dirs[cells[1]])
    assert lock.try_take() is None  # a trainer holds cell 1
    try:
        rows = grid_status(cells, dirs, failed={cells[3].label})
        held = cell_state(dirs[cells[1]])
    finally:
        lock.release()
    assert [r["state"] for r in rows] == ["finished", "running", "interrupted", "failed", "waiting"]
    assert rows[0]["test_bleu4"] == 0.5 and rows[0]["val_best"] == 0.48
    assert "pid" in held["holder"]
    assert cell_state(dirs[cells[1]])["state"] == "waiting"  # released: nobody holds it
    assert not (dirs[cells[4]] / LOCK).exists()  # a query creates no lock file
    text = status_text("g", tmp_path, rows)
    assert text.splitlines()[0] == (f"grid g ({tmp_path}): 5 cells, 1 finished, 1 running, "
                                    "1 interrupted, 1 failed, 1 waiting")
    assert "test BLEU-4 0.5000, 10 min, 20 CPU-min, AMD EPYC" in text and "the next run resumes it" in text
    # the finished cells' recorded CPU time, and the rest estimated at its mean (20 CPU-min)
    assert text.splitlines()[1] == ("  CPU time: 1 finished cell took 0.3 CPU-hours (20 CPU-min a cell); "
                                    "the 4 not finished, at that mean: about 1.3 CPU-hours")


def test_the_cost_line_counts_only_recorded_cpu_time(tmp_path):
    """No line before any cell recorded CPU time; a finished grid has no estimate clause."""
    rows = [{"state": "finished", "cpu_s": 1800.0}, {"state": "finished", "cpu_s": 5400.0}]
    assert cost_text(rows) == "  CPU time: 2 finished cells took 2.0 CPU-hours (60 CPU-min a cell)"
    assert cost_text([{"state": "finished", "cpu_s": None}, {"state": "waiting", "cpu_s": None}]) is None
    rest = [{"state": "waiting", "cpu_s": None}, {"state": "running", "cpu_s": None}]
    with_waiting = cost_text(rows + rest)
    assert with_waiting.endswith("; the 2 not finished, at that mean: about 2.0 CPU-hours")


def test_the_code_line_names_the_commits_the_finished_cells_ran_at(tmp_path):
    """One commit: said once; several (a grid continued at another commit, or from a tree with
    uncommitted changes): each with its count, the most cells first; none before a cell finished."""
    a, b = "458d2c9f6048bad2c80881a349771fcf5aa44682", "f1a3344ccc42e41208cc34ea90c5177e561777d5"
    cells = [Cell("lstm", "matched", "dot", k) for k in range(5)]
    dirs = {c: tmp_path / f"cell{c.seed}" for c in cells}
    for cell, commit in zip(cells, [a, a, b, f"{b}+dirty", None]):
        dirs[cell].mkdir()
        if commit is not None or cell.seed == 4:
            record = {"test/bleu4": 0.5} | ({"git_commit": commit} if commit else {})
            (dirs[cell] / "results.json").write_text(json.dumps(record))
    rows = grid_status(cells, dirs)
    assert code_text(rows) == ("  code: the finished cells ran at 4 commits: 458d2c9 (2 cells), a commit "
                               "not recorded (1 cell), f1a3344 (1 cell), f1a3344 with uncommitted "
                               "changes (1 cell)")
    many = [{"state": "finished", "commit": f"{k:07x}"} for k in range(6)] + rows[:2]
    assert code_text(many) == ("  code: the finished cells ran at 7 commits: 458d2c9 (2 cells), 0000000 "
                               "(1 cell), 0000001 (1 cell), 4 other commits (4 cells)")
    assert code_text(rows[:2]) == "  code: every finished cell ran at 458d2c9"
    assert code_text([{**r, "state": "running"} for r in rows]) is None
    assert "  code: every finished cell ran at 458d2c9" in status_text("g", tmp_path, rows[:2]).splitlines()


def test_a_running_or_interrupted_cell_shows_its_last_epoch_line(tmp_path):
    """How far a cell has got: the last epoch line of its train.log (appended by each part)."""
    import logging

    from captioning.compare.cell_log import cell_log

    cells, dirs = _cells(tmp_path)
    log = logging.getLogger("captioning.lit.console")
    root_level = logging.getLogger().level
    with cell_log(dirs[cells[2]]):  # the interrupted cell's two parts
        log.info("epoch 4/40: val/bleu4 0.6012 (new best), 131 s")
    with cell_log(dirs[cells[2]]):
        log.info("epoch 5/40: val/bleu4 0.5990 (best 0.6012), 129 s")
        log.warning("a warning between epochs")
    assert logging.getLogger().level == root_level and not any(
        getattr(h, "baseFilename", "").endswith("train.log") for h in logging.getLogger().handlers)
    rows = grid_status(cells, dirs)
    assert rows[2]["epoch"] == "epoch 5/40: val/bleu4 0.5990 (best 0.6012), 129 s"
    assert rows[4]["epoch"] is None  # waiting: no log
    text = status_text("g", tmp_path, rows)
    assert "the next run resumes it (epoch 5/40: val/bleu4 0.5990 (best 0.6012), 129 s)" in text


def test_the_grids_own_process_and_a_cluster_job_write_the_cells_train_log(tmp_path, monkeypatch):
    """Serially (the grid's process) and through a submitit executor (in-process debug here,
    SLURM on a cluster) each cell logs to its train.log as a worker's job does."""
    import logging

    from test_compare import DIMS, FakeRuns

    import captioning.compare.grid as grid_mod
    from captioning.compare.executor import make_executor
    from captioning.compare.grid import GridRunner

    fake = FakeRuns()

    def train(cfg):
        logging.getLogger("captioning.lit.console").info(f"epoch 2/2: {cfg.attention.name} done")
        return fake.train(cfg)

    monkeypatch.setattr(grid_mod, "train", train)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    serial = runner.run([Cell("lstm", "matched", "dot", 0)])
    executor = make_executor("debug", tmp_path / ".submitit")
    jobs = runner.run([Cell("lstm", "matched", "additive", 0)], executor)
    for dirs, mode in ((serial, "dot"), (jobs, "additive")):
        (out,) = dirs.values()
        assert f"- epoch 2/2: {mode} done" in (out / "train.log").read_text()


def test_a_resumed_runs_wall_time_is_shown_only_where_it_covers_every_part(tmp_path):
    """Older results.json files give a resumed run's last part's wall time alone: not shown as
    the run's; the CPU time (all parts) is."""
    old, new = tmp_path / "old", tmp_path / "new"
    for d, extra in ((old, {}), (new, {"wall_time_s_earlier_parts": 2400.0})):
        d.mkdir()
        (d / "results.json").write_text(json.dumps(
            {"test/bleu4": 0.5, "wall_time_s": 3000.0, "cpu_s": 3100.0, "resumed": 1, **extra}))
    assert (cell_state(old)["wall_s"], cell_state(old)["cpu_s"]) == (None, 3100.0)
    assert (cell_state(new)["wall_s"], cell_state(new)["cpu_s"]) == (3000.0, 3100.0)


def test_status_of_a_committed_grid_trains_and_writes_nothing(tmp_path):
    """The committed convergence study: every grid cell finished, nothing written under results/."""
    before = subprocess.run(["git", "status", "--porcelain", "results"], cwd=ROOT,
                            capture_output=True, text=True).stdout
    out = subprocess.run([sys.executable, "scripts/compare.py", "experiment=convergence_unpaired",
                          "compare.status=true", "logger=none"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    first = out.stdout.splitlines()[0]
    assert first.startswith("grid convergence (results/convergence): ") and first.endswith("finished")
    n = int(first.split(": ")[1].split()[0])
    assert n > 50 and f"{n} cells, {n} finished" in first
    assert "training" not in out.stderr
    assert subprocess.run(["git", "status", "--porcelain", "results"], cwd=ROOT,
                          capture_output=True, text=True).stdout == before


def test_the_learned_grids_headline_command_composes_and_reports_its_state():
    """docs/comparison.md's headline-modes-first command: its status runs (the controls name
    `general`, which this run leaves out) and lists no `general` cell."""
    out = subprocess.run([sys.executable, "scripts/compare.py", "experiment=convergence_learned",
                          "compare.status=true", "compare.sweep.train=true", "logger=none",
                          "compare.attentions=[additive,dot,scaled_dot]"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    # (where the encoder file is absent, as in a fresh clone, a line per committed cell first
    # says it was matched on the rest of its config)
    table = out.stdout[out.stdout.index("grid convergence_learned (results/convergence_learned): "):]
    cells = [line for line in table.splitlines() if line.startswith("  lstm/")]
    assert any("/additive/s5/" in line for line in cells) and not any("general" in line for line in cells)
    assert "\nsweep (validation only):\n  lstm/matched/additive  " in table


def test_a_report_before_the_grids_own_sweep_chose_a_rate_says_where_it_stands(tmp_path):
    """Report only (compare.train=false) on a grid that takes its rates from its own sweep,
    which has chosen none: one line naming the sweep's cells and the commands that move it on,
    exit 2, nothing written (it used to advise the sweep's train flag given in the same command)."""
    out = subprocess.run([sys.executable, "scripts/compare.py", "experiment=convergence_learned",
                          "compare.train=false", "compare.sweep.train=true", "logger=none",
                          f"compare.root={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    line = out.stderr.strip().splitlines()[-1]
    assert "sweep has chosen no mode's rate yet (0 of its cells finished, of at most 98," in line
    assert "compare.status=true compare.sweep.train=true" in line and "Traceback" not in out.stderr
    assert not any(tmp_path.iterdir())


def test_the_sweeps_lines_say_each_modes_rates_begun_and_its_choice(tmp_path):
    """A mode chosen, a mode with a rate half done (one of its two seeds), a mode not begun."""
    from captioning.compare.status import sweep_text
    from captioning.compare.sweep import sweep_report

    lrs = [1e-3, 3e-3, 1e-2]
    scores = {("additive", 1e-3): 0.50, ("additive", 3e-3): 0.55, ("additive", 1e-2): 0.45,
              ("dot", 1e-3): 0.40}
    every = [Cell("lstm", "matched", m, seed, lr) for m in ("additive", "dot", "scaled_dot")
             for lr in lrs for seed in (5, 6)]
    dirs = {}
    for cell in every:
        if (cell.attention, cell.lr) in scores and not (cell.attention == "dot" and cell.seed == 6):
            out = tmp_path / f"{cell.attention}{cell.lr}{cell.seed}"
            out.mkdir()
            (out / "results.json").write_text(json.dumps({"best_score": scores[(cell.attention, cell.lr)]}))
            dirs[cell] = out
    text = sweep_text(sweep_report(dirs, lrs, every)["rows"], {f"lstm/matched/{m}": 2 for m in
                                                              ("additive", "dot", "scaled_dot")})
    lines = text.splitlines()
    assert lines[0] == "sweep (validation only):"
    assert lines[1].split() == ["lstm/matched/additive", "0.001", "0.5000", "(2", "of", "2", "seeds);",
                                "0.003", "0.5500", "(2", "of", "2", "seeds);", "0.01", "0.4500", "(2", "of",
                                "2", "seeds);", "chose", "0.003"]
    assert lines[2].endswith("0.001 0.4000 (1 of 2 seeds); needs 0.001, 0.003, 0.01")
    assert lines[3].endswith("lstm/matched/scaled_dot  nothing finished yet")


def test_the_grid_wandb_run_holds_the_table_of_cells(tmp_path, monkeypatch):
    from test_wandb import read_run

    from captioning.lit.loggers import wandb_logger

    monkeypatch.setenv("WANDB_MODE", "offline")
    for var in ("cache", "config", "data"):
        monkeypatch.setenv(f"WANDB_{var.upper()}_DIR", str(tmp_path / "wandb-home" / var))
    cells, dirs = _cells(tmp_path)
    logger = wandb_logger(save_dir=str(tmp_path / "board"), name="grid-g", job_type="grid")
    board = GridBoard(logger, cells)
    board.update(dirs, set())
    (dirs[cells[4]] / "results.json").write_text(json.dumps({"test/bleu4": 0.4}))
    board.update(dirs, {cells[3].label})
    board.finish()
    (run_dir,) = (tmp_path / "board" / "wandb").glob("offline-run-*")
    steps = [r["history"]["item"] for r in read_run(run_dir) if r["type"] == "history"]
    assert [s.get("grid/finished") for s in steps] == [1, 2]
    assert [s.get("grid/failed") for s in steps] == [0, 1]
    assert all(s.get("grid/cells._type") == "table-file" for s in steps)
    tables = sorted((run_dir / "files" / "media" / "table" / "grid").glob("cells_*.table.json"),
                    key=lambda f: int(f.name.split("_")[1]))
    last = json.loads(tables[-1].read_text())
    assert last["columns"][:3] == ["cell", "state", "test_bleu4"]
    assert [row[1] for row in last["data"]] == ["finished", "waiting", "interrupted", "failed", "finished"]
    assert last["data"][4][2] == 0.4


def test_the_workers_report_each_change_with_the_failed_cells(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    from omegaconf import OmegaConf

    tests = str(Path(__file__).resolve().parent)
    monkeypatch.syspath_prepend(tests)
    monkeypatch.setenv("PYTHONPATH", tests)
    import worker_jobs

    from captioning.compare.workers import run_parallel

    todo = [(Cell("lstm", "matched", "additive", k),
             OmegaConf.create({"trainer": {"num_threads": 1}, **s}), tmp_path / f"c{k}")
            for k, s in enumerate([{"sleep": 0.2}, {"broken": "x", "sleep": 0.2}])]
    seen: list[set[str]] = []
    with caplog_off():
        failed = run_parallel(todo, 2, tmp_path / "sub", gpus=0, job=worker_jobs.record_cell,
                              on_change=lambda f: seen.append(set(f)))
    assert len(failed) == 1 and seen[0] == set() and seen[-1] == {"lstm/matched/additive/s1"}
    assert len(seen) == 4  # two starts, two ends


class caplog_off:
    def __enter__(self):
        logging.disable(logging.INFO)

    def __exit__(self, *exc):
        logging.disable(logging.NOTSET)
