"""A grid's work order as data (compare/plan.py): a sweep trains only the rates its choices
need, and a grid that names its sweep (compare.sweep.train) trains a mode's seeds once the
sweep has chosen its rate, serially and with workers."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from omegaconf import open_dict
from test_compare import DIMS, FakeRuns, RunAtSubmit

import captioning.compare.grid as grid_mod
from captioning.compare.cells import expand_grid
from captioning.compare.grid import GridRunner
from captioning.compare.plan import SweepThenGrid
from captioning.schema import completed
from captioning.schema.compare import Compare

TESTS = str(Path(__file__).resolve().parent)
PEAKS = {"additive": 3e-3, "dot": 3e-4}  # validation peaks inside the range and at its low edge
LRS = [3e-4, 1e-3, 3e-3, 1e-2]


def _compose(overrides: list[str]):
    cfg = FakeRuns().compose(overrides)
    kv = dict(o.split("=", 1) for o in overrides)
    cfg.optim.optimizer.lr = float(kv.get("optim.optimizer.lr", 0))
    with open_dict(cfg):
        cfg.peaks = PEAKS
        cfg.sleep = 0.5
        cfg.trainer = {"num_threads": 1}
    return cfg


def _plan(tmp_path: Path, rates: dict | None = None,
          sweep_seeds: tuple[int, ...] = (5,)) -> tuple[GridRunner, SweepThenGrid]:
    spec = completed({"attentions": ["additive", "dot"], "decoders": ["lstm"], "seeds": [0, 1],
                      "dims": ["matched"], "blind": False, "rates": rates or {},
                      "sweep": {"lrs": LRS, "seeds": list(sweep_seeds), "dims": ["matched"],
                                "train": True}}, Compare)
    runner = GridRunner(_compose, [], tmp_path, DIMS)
    sweep = expand_grid({**spec, **spec["sweep"]})
    return runner, SweepThenGrid(runner, sweep, LRS, lambda r: expand_grid({**spec, "rates": r}),
                                 dict(spec["rates"]))


def _score(cfg) -> float:
    lr = cfg.optim.optimizer.lr
    return 0.5 - 0.1 * (math.log10(lr) - math.log10(PEAKS[cfg.attention.name])) ** 2


def _record_training(monkeypatch) -> list[tuple]:
    """grid.train replaced by a run that scores its cell by _score -> the (mode, seed, lr) of
    each cell it trains, in order."""
    trained = []

    def train(cfg):
        trained.append((cfg.attention.name, cfg.seed, cfg.optim.optimizer.lr))
        out = Path(cfg.paths.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps({
            "best_score": _score(cfg), "monitor": "val/bleu4", "best_epoch": 1, "epochs_trained": 2}))

    monkeypatch.setattr(grid_mod, "train", train)
    return trained


def test_the_sweep_comes_first_then_each_modes_seeds_at_its_chosen_rate(tmp_path, monkeypatch):
    trained = _record_training(monkeypatch)
    runner, plan = _plan(tmp_path)
    assert plan.rated() == []  # nothing chosen yet: no grid cell may start
    done = runner.run_plan(plan)
    # the sweep, bracketed (modes take turns, the middle rate first), on its own seed
    assert trained[:6] == [("additive", 5, 1e-3), ("dot", 5, 1e-3), ("additive", 5, 3e-3),
                           ("dot", 5, 3e-3), ("additive", 5, 1e-2), ("dot", 5, 3e-4)]
    # then the grid's seeds, each mode at the rate its sweep chose (validation only)
    assert plan.rates() == {"lstm/matched/additive": 3e-3, "lstm/matched/dot": 3e-4}
    assert trained[6:] == [("additive", 0, 3e-3), ("dot", 0, 3e-4), ("additive", 1, 3e-3), ("dot", 1, 3e-4)]
    assert len(done) == 10 and runner.run_plan(plan) == done and len(trained) == 10  # resumes: nothing left


def test_on_a_cluster_the_sweep_is_one_job_array_and_the_seeds_the_next(tmp_path, monkeypatch):
    """compare.executor=slurm with a sweep to train: every rate at once (a cluster's width
    instead of the bracketing order), then each mode's seeds at the rate the sweep chose, as a
    second job array; the choices are the serial run's."""
    trained = _record_training(monkeypatch)
    runner, plan = _plan(tmp_path)
    executor = RunAtSubmit()
    done = runner.run_plan(plan, executor=executor)
    assert [len(array) for array in executor.arrays] == [8, 4]
    assert sorted(trained[:8]) == sorted((m, 5, lr) for m in ("additive", "dot") for lr in LRS)
    assert plan.rates() == {"lstm/matched/additive": 3e-3, "lstm/matched/dot": 3e-4}
    assert sorted(trained[8:]) == [("additive", 0, 3e-3), ("additive", 1, 3e-3), ("dot", 0, 3e-4),
                                   ("dot", 1, 3e-4)]
    assert len(done) == 12 and runner.failed == []
    assert runner.run_plan(plan, executor=executor) == done and len(executor.arrays) == 2  # nothing left


def test_a_cell_left_with_a_checkpoint_is_resumed_before_any_fresh_cell(tmp_path, monkeypatch):
    """A stopped run's interrupted cells (a sweep cell and a grid seed) go first; then the
    plan's own order."""
    trained = []

    def train(cfg):
        trained.append((cfg.attention.name, cfg.seed, cfg.optim.optimizer.lr, bool(cfg.get("resume"))))
        out = Path(cfg.paths.output_dir)
        (out / "results.json").write_text(json.dumps({
            "best_score": _score(cfg), "monitor": "val/bleu4", "best_epoch": 1, "epochs_trained": 2}))

    monkeypatch.setattr(grid_mod, "train", train)
    runner, plan = _plan(tmp_path)
    late = next(c for c in plan.cells() if (c.attention, c.seed, c.lr) == ("dot", 5, 3e-3))
    (runner.directory(late) / "checkpoints").mkdir(parents=True)
    (runner.directory(late) / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert plan.ready(set())[0] == late
    runner.run_plan(plan)
    assert trained[0] == ("dot", 5, 3e-3, True)
    assert trained[1][:3] == ("additive", 5, 1e-3)  # then the plan's order (dot has had a turn)
    assert not any(t[3] for t in trained[1:])


def test_with_two_held_out_seeds_each_rate_a_choice_rests_on_has_both(tmp_path, monkeypatch):
    """Sweep seeds 5 and 6: every rate trained is trained at both seeds, and each mode's seeds
    start only after both seeds of its chosen rate and of its neighbours have finished."""
    trained = []

    def train(cfg):
        trained.append((cfg.attention.name, cfg.seed, cfg.optim.optimizer.lr))
        (Path(cfg.paths.output_dir) / "results.json").write_text(json.dumps({
            "best_score": _score(cfg) + 0.01 * cfg.seed, "monitor": "val/bleu4"}))

    monkeypatch.setattr(grid_mod, "train", train)
    runner, plan = _plan(tmp_path, sweep_seeds=(5, 6))
    runner.run_plan(plan)
    assert plan.rates() == {"lstm/matched/additive": 3e-3, "lstm/matched/dot": 3e-4}
    swept = [t for t in trained if t[1] in (5, 6)]
    assert sorted(swept) == sorted({(m, s, lr) for m, _, lr in swept for s in (5, 6)})
    for mode, chosen in (("additive", 3e-3), ("dot", 3e-4)):
        first_seed = next(i for i, t in enumerate(trained) if t[0] == mode and t[1] == 0)
        i = LRS.index(chosen)
        for lr in LRS[max(i - 1, 0):i + 2]:
            assert {t[1] for t in trained[:first_seed] if t[0] == mode and t[2] == lr} == {5, 6}


def test_a_rate_given_in_compare_rates_wins_over_the_sweeps_choice(tmp_path, monkeypatch):
    monkeypatch.setattr(grid_mod, "train", FakeRuns().train)
    _, plan = _plan(tmp_path, rates={"lstm/*/dot": 1e-2})
    assert plan.rates() == {"lstm/*/dot": 1e-2}
    assert {(c.attention, c.lr) for c in plan.rated()} == {("dot", 1e-2)}


def test_with_workers_no_seed_starts_before_the_sweep_cells_that_choose_its_rate(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    import worker_jobs

    runner, plan = _plan(tmp_path)
    done = runner.run_plan(plan, workers=2, job=worker_jobs.scored_cell)
    assert runner.failed == []
    assert plan.rates() == {"lstm/matched/additive": 3e-3, "lstm/matched/dot": 3e-4}
    runs = {c: json.loads((d / "results.json").read_text()) for c, d in done.items()}
    grid = [c for c in runs if c.seed in (0, 1)]
    assert sorted((c.attention, c.seed, c.lr) for c in grid) == [
        ("additive", 0, 3e-3), ("additive", 1, 3e-3), ("dot", 0, 3e-4), ("dot", 1, 3e-4)]
    for cell in grid:
        # the sweep cells its mode's choice rests on (the chosen rate and its neighbours) had
        # finished before it started
        chosen = LRS.index(cell.lr)
        basis = [c for c in runs if c.seed == 5 and c.attention == cell.attention
                 and abs(LRS.index(c.lr) - chosen) <= 1]
        assert len(basis) >= 2
        assert all(runs[b]["end"] <= runs[cell]["start"] for b in basis), cell
    # a cell's directory is made when it starts: none for a rate the plan listed but never ran
    made = {p.parent for p in tmp_path.rglob("cell.json")}
    assert made == set(done.values()) and all((d / "results.json").exists() for d in made)
    # at most two at once
    spans = sorted((r["start"], r["end"]) for r in runs.values())
    assert all(sum(1 for s, e in spans if s < t_end and t_start < e) <= 2 for t_start, t_end in spans)
