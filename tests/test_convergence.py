"""Training to convergence: the warm-up + plateau schedule, early stopping, the validation curve
and the fixed-budget snapshots a run records (results.json: val_curve, best_epoch,
epochs_trained, stopped_early_after, at_epoch), and a fixed thread count."""

import io
import json
from pathlib import Path

import pytest
import torch

from captioning.lit.schedules import WarmupPlateau
from captioning.lit.training import train


def _optimizer(lr: float = 1.0) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def test_warmup_rises_linearly_then_the_plateau_rule_halves_and_warmup_never_undoes_it():
    opt = _optimizer(1.0)
    sched = WarmupPlateau(opt, warmup_steps=4, mode="max", factor=0.5, patience=1)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(6):
        opt.step()
        sched.warmup.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs[:6] == pytest.approx([0.25 + 0.75 * k / 4 for k in range(5)] + [1.0])  # lr / 4 -> lr
    for score in (0.5, 0.4, 0.4):  # best, then two validations without improvement: halved
        sched.step(score)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5)
    for _ in range(3):  # warm-up steps after warm-up leave the plateau's rate alone
        sched.warmup.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5)


def test_warmup_plateau_state_is_plain_data_and_round_trips():
    opt = _optimizer(1.0)
    sched = WarmupPlateau(opt, warmup_steps=3, mode="max", factor=0.1, patience=1)
    for score in (0.5, 0.4, 0.3):
        sched.step(score)
    buf = io.BytesIO()
    torch.save({"plateau": sched.state_dict(), "warmup": sched.warmup.state_dict()}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)  # no pickled scheduler object inside
    again = WarmupPlateau(_optimizer(1.0), warmup_steps=3, mode="max", factor=0.1, patience=1)
    again.load_state_dict(state["plateau"])
    assert again.best == sched.best and again.num_bad_epochs == sched.num_bad_epochs
    assert again.warmup is not None and again.warmup is not sched.warmup


@pytest.fixture(scope="module")
def converged(tmp_path_factory, data_dir):
    """A tiny run to convergence: warm-up + plateau, early stopping, a snapshot every epoch."""
    from tests.conftest import TINY, compose_cfg, shrink

    out = tmp_path_factory.mktemp("converged") / "run"
    cfg = shrink(compose_cfg(TINY + ["schedule=warmup_plateau", "optim.scheduler.warmup_steps=24",
                                     "early_stopping.patience=2", "trainer.max_epochs=8",
                                     "checkpoint.snapshot_epochs=[1,2,3,4,5,6,7,8]",
                                     "decode.beam_size=1", "trainer.num_threads=1"],
                             out, data_dir))
    return train(cfg), out


def test_the_curve_has_every_epoch_and_best_epoch_is_its_best(converged):
    results, out = converged
    curve = results["val_curve"]
    assert [e["epoch"] for e in curve] == list(range(1, results["epochs_trained"] + 1))
    assert [e["step"] for e in curve] == [24 * e["epoch"] for e in curve]  # 96 images, batch 4
    best = max(curve, key=lambda e: (e["val/bleu4"], -e["epoch"]))
    assert results["best_epoch"] == best["epoch"]
    assert results["best_score"] == pytest.approx(best["val/bleu4"], abs=1e-6)  # logged as float32
    assert all({"val/cider", "val/attr_acc", "lr"} <= e.keys() for e in curve)
    # warm-up over the first epoch: the first validation sees the full rate
    assert curve[0]["lr"] == pytest.approx(5e-3)


def test_best_checkpoint_is_the_snapshot_of_its_epoch(converged):
    """The test of best.ckpt equals the test of the same epoch's snapshot: one rule for both."""
    results, out = converged
    snap = results["at_epoch"][str(results["best_epoch"])]
    assert snap["test/bleu4"] == results["test/bleu4"]
    assert set(results["at_epoch"]) == {str(e) for e in range(1, results["epochs_trained"] + 1)}
    best_preds = json.loads((out / "predictions.json").read_text())
    same = json.loads((out / f"predictions_epoch{results['best_epoch']}.json").read_text())
    assert best_preds == same


def test_early_stopping_ends_a_run_that_stopped_improving(tiny_cfg):
    """A rate so small that validation never changes: the first epoch is the best, and the run
    stops after `patience` more, long before its cap; the snapshot past the stop is absent."""
    results = train(tiny_cfg("early_stopping.patience=1", "trainer.max_epochs=6",
                             "optim.optimizer.lr=1e-12", "schedule=constant",
                             "checkpoint.snapshot_epochs=[2,5]", "decode.beam_size=1"))
    assert results["epochs_trained"] == 2 and results["stopped_early_after"] == 2
    assert results["best_epoch"] == 1
    assert set(results["at_epoch"]) == {"2"}


def test_num_threads_is_set_and_recorded(converged):
    results, _ = converged
    assert results["threads"] == 1


def test_the_smoothed_monitor_is_the_mean_of_the_last_validations():
    """early_stopping.smoothing=3: each validation's entry holds the mean of the monitor over the
    last three (fewer at the start), and early stopping reads it from the trainer's metrics."""
    from types import SimpleNamespace

    from captioning.lit.learning_curve import ValidationCurve

    curve = ValidationCurve("val/bleu4", smoothing=3)
    trainer = SimpleNamespace(sanity_checking=False, global_step=0, optimizers=[], callback_metrics={})
    module = SimpleNamespace(metrics={})
    for epoch, score in enumerate([0.1, 0.4, 0.1, 0.7]):
        trainer.current_epoch, module.metrics = epoch, {"val": {"val/bleu4": score}}
        curve.on_validation_end(trainer, module)
    assert [round(e["val/bleu4_smooth"], 6) for e in curve.curve] == [0.1, 0.25, 0.2, 0.4]
    assert float(trainer.callback_metrics["val/bleu4_smooth"]) == pytest.approx(0.4)
    raw = ValidationCurve("val/bleu4")  # smoothing 1: the raw score only
    raw.on_validation_end(trainer, module)
    assert "val/bleu4_smooth" not in raw.curve[0]


def test_early_stopping_on_the_smoothed_curve_ends_a_flat_run(tiny_cfg):
    """The smoothed monitor reaches early stopping in a real run: a flat curve stops after
    `patience` validations without a new smoothed best, and the curve records the means."""
    results = train(tiny_cfg("early_stopping.patience=1", "early_stopping.smoothing=2",
                             "trainer.max_epochs=6", "optim.optimizer.lr=1e-12", "schedule=constant",
                             "decode.beam_size=1"))
    assert results["stopped_early_after"] == 2 and results["best_epoch"] == 1
    assert all("val/bleu4_smooth" in e for e in results["val_curve"])


def test_the_compute_is_counted_per_part_and_a_cell_of_both_sweep_and_grid_once(tmp_path):
    """convergence.tally: runs and core-hours from each cell's cpu_s, split per decoder x
    features x role; a cell the sweep and the grid share (one hash, one folder) is the grid's."""
    from captioning.compare.cells import Cell
    from captioning.compare.convergence import tally

    def cell(name: str, cpu_s: float) -> Path:
        out = tmp_path / name
        out.mkdir()
        (out / "results.json").write_text(json.dumps({"cpu_s": cpu_s, "git_commit": "abc"}))
        return out

    shared, swept, other = cell("shared", 3600), cell("swept", 1800), cell("other", 7200)
    grid = {Cell("lstm", "matched", "additive", 0, 1e-3): shared,
            Cell("lstm", "native512", "dot", 0, 1e-3): other}
    sweep = {Cell("lstm", "matched", "additive", 0, 1e-3): shared,
             Cell("lstm", "matched", "additive", 0, 3e-3): swept}
    out = tally(grid, sweep)
    assert out["runs"] == 3 and out["cpu_h"] == 3.5
    assert [(p["dims"], p["role"], p["cells"], p["cpu_h"]) for p in out["cost"]] == [
        ("matched", "sweep", 1, 0.5), ("matched", "grid", 1, 1.0), ("native512", "grid", 1, 2.0)]
    assert tally(grid)["cost"] == [p for p in out["cost"] if p["role"] == "grid"]
