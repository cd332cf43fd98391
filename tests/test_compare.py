"""The comparison grid: expansion, mixed resolution, skip/resume, the mixed identity, the report."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

import captioning.compare.grid as grid_mod
from captioning.compare import (
    Cell,
    GridRunner,
    build_markdown,
    build_report,
    expand_grid,
    save_plots,
)
from captioning.compare.cells import rate_for
from captioning.lit import train
from captioning.models import resolved_attention
from captioning.schema import completed
from captioning.schema.compare import Compare

SPEC = completed({"attentions": ["additive", "dot", "mixed"], "decoders": ["lstm"], "seeds": [0, 1],
                  "dims": ["mismatched", "matched"], "blind": True}, Compare)
DIMS = {"mismatched": ["encoder.pca_dim=null"], "matched": ["encoder.pca_dim=512"]}


def test_expand_grid_is_seed_major_with_blinds():
    cells = expand_grid(SPEC)
    assert len(cells) == 2 * 2 * (3 + 1)
    assert [c.seed for c in cells[:8]] == [0] * 8  # a half-done grid has whole seeds
    assert Cell("lstm", "matched", "blind", 1) in cells
    assert Cell("lstm", "matched", "blind", 0).overrides(DIMS) == [
        "decoder=lstm", "seed=0", "encoder.pca_dim=512", "attention=additive", "data.blind=true"]
    assert Cell("transformer", "matched", "dot", 0).overrides(
        DIMS, {"transformer": ["trainer.max_epochs=5"]}) == [
        "decoder=transformer", "seed=0", "trainer.max_epochs=5", "encoder.pca_dim=512", "attention=dot"]
    with pytest.raises(ValueError, match="dim_settings"):
        Cell("lstm", "other", "dot", 0).overrides(DIMS)


@pytest.mark.parametrize("overrides, choice", [
    (["encoder.pca_dim=512"], "dot"),
    (["encoder.pca_dim=512", "attention.dot=scaled_dot"], "scaled_dot"),
    ([], "additive"),  # 512-d queries, 2048-d keys
    (["decoder=transformer"], "additive"),
    (["decoder=transformer", "decoder.project_features=true"], "dot"),  # keys projected to 512
    (["decoder.hidden_dim=2048"], "dot"),
])
def test_mixed_resolves_from_the_widths_the_model_gets(overrides, choice, tmp_path):
    from conftest import compose_cfg

    cfg = compose_cfg(["attention=mixed", *overrides], tmp_path, tmp_path)
    assert resolved_attention(OmegaConf.to_container(cfg, resolve=True)) == choice
    same = [o for o in overrides if not o.startswith("attention.")]
    plain = OmegaConf.to_container(compose_cfg(["attention=dot", *same], tmp_path, tmp_path), resolve=True)
    assert resolved_attention(plain) == "dot"  # every other mode is itself


class FakeRuns:
    """compose() from override lists and a train() that writes results: counts real work."""

    def __init__(self):
        self.trained: list[str] = []

    def compose(self, overrides):
        kv = dict(o.split("=", 1) for o in overrides)
        pca = None if kv.get("encoder.pca_dim", "null") == "null" else int(kv["encoder.pca_dim"])
        return OmegaConf.create(completed({  # every other setting at its default, as composed
            "decoder": {"name": kv.get("decoder", "lstm"), "hidden_dim": 512},
            "encoder": {"name": "resnet50", "pca_dim": pca},
            "attention": {"name": kv.get("attention", "additive"), "dot": "dot"},
            "data": {"blind": kv.get("data.blind") == "true", "synthetic": {}},
            "seed": int(kv.get("seed", 0)), "paths": {"output_dir": "x"},
        }))

    def train(self, cfg):
        out = Path(cfg.paths.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.trained.append(f"{cfg.attention.name}/{cfg.encoder.pca_dim}/{cfg.seed}/{cfg.data.blind}")
        (out / "results.json").write_text(json.dumps({"test/bleu4": 0.5}))


def test_finished_cells_are_skipped_and_grids_resume(tmp_path, monkeypatch):
    fake = FakeRuns()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    cells = expand_grid(SPEC)
    dirs = runner.run(cells)
    # mixed is never trained: matched -> the dot cell, mismatched -> the additive cell
    assert len(fake.trained) == 2 * 2 * 3 and not any(t.startswith("mixed") for t in fake.trained)
    assert dirs[Cell("lstm", "matched", "mixed", 0)] == dirs[Cell("lstm", "matched", "dot", 0)]
    assert dirs[Cell("lstm", "mismatched", "mixed", 1)] == dirs[Cell("lstm", "mismatched", "additive", 1)]
    assert len(set(dirs.values())) == 12
    runner.run(cells)  # everything finished: nothing runs
    assert len(fake.trained) == 12
    (dirs[Cell("lstm", "matched", "dot", 1)] / "results.json").unlink()  # interrupted there
    runner.run(cells)
    assert fake.trained[12:] == ["dot/512/1/False"]


def test_a_cell_another_experiment_finished_is_used_not_retrained(tmp_path, monkeypatch):
    fake = FakeRuns()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    zoo_cells = [Cell("lstm", "mismatched", m, 0) for m in ("additive", "general")]
    (tmp_path / "zoo" / "cells" / "unfinished").mkdir(parents=True)  # never borrowed
    cross, zoo = tmp_path / "cross_modal", tmp_path / "zoo"
    first = GridRunner(fake.compose, [], cross, DIMS, shared=[zoo]).run([zoo_cells[0]])
    dirs = GridRunner(fake.compose, [], zoo, DIMS, shared=[cross]).run(zoo_cells)
    assert fake.trained == ["additive/None/0/False", "general/None/0/False"]
    assert dirs[zoo_cells[0]] == first[zoo_cells[0]]  # the comparison's, where it is
    assert dirs[zoo_cells[1]].parent == zoo / "cells"
    # The other way round too, and report-only mode finds it the same way:
    again = GridRunner(fake.compose, [], cross, DIMS, shared=[zoo])
    assert again.run(zoo_cells[1:])[zoo_cells[1]] == dirs[zoo_cells[1]]
    assert len(fake.trained) == 2
    # A cell the other experiment finished under an older hash rule is adopted where it is:
    legacy = first[zoo_cells[0]].rename(cross / "cells" / "0ld")
    dirs = GridRunner(fake.compose, [], zoo, DIMS, shared=[cross]).run(zoo_cells)
    assert dirs[zoo_cells[0]] == first[zoo_cells[0]] and not legacy.exists()
    assert len(fake.trained) == 2


def test_mixed_trains_identically_to_the_mode_it_picks(tiny_cfg):
    """Matched widths (64-d PCA features, 64-d queries): mixed == dot, same seed, same numbers."""
    matched = ["encoder.normalize=pca_whiten", "encoder.pca_dim=64", "trainer.max_epochs=2",
               "decode.beam_size=1"]
    mixed = train(tiny_cfg("attention=mixed", *matched))
    dot = train(tiny_cfg("attention=dot", *matched))
    assert mixed["attention_resolved"] == "dot"
    for key in ("test/bleu4", "test/bleu1", "test/attr_acc", "test/attn_entropy"):
        assert mixed[key] == dot[key], key


def _write_run(out: Path, bleu4: float, caption: str, attr: float, attention: str) -> Path:
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps({
        "test/bleu4": bleu4, "test/attr_acc": attr, "test/attn_entropy": 1.0,
        "attention_resolved": attention, "attention_params": 10, "params": 100,
        "git_commit": "abc", "machine": "Xeon (amx)", "accelerator": None,
        "feature_precision": "bfloat16", "wall_time_s": 3600.0,
        **({} if attention == "blind" else {"cpu_s": 7200.0}),  # blinds: from before cpu_s
    }))
    (out / "predictions.json").write_text(json.dumps([{"image_id": 1, "caption": caption},
                                                      {"image_id": 2, "caption": caption}]))
    return out


def test_report_pairs_seeds_flags_undertrained_and_renders(tmp_path):
    ref = ["a", "red", "circle", "on", "the", "left"]
    refs = {1: [ref], 2: [ref]}
    spec = {**SPEC, "dims": ["matched"], "undertrained_margin": 0.10}
    dirs = {}
    values = {("additive", 0): 0.60, ("additive", 1): 0.50, ("dot", 0): 0.40, ("dot", 1): 0.40,
              ("blind", 0): 0.20, ("blind", 1): 0.45, ("scaled_dot", 0): 0.25, ("scaled_dot", 1): 0.30}
    for (mode, seed), b4 in values.items():
        dirs[Cell("lstm", "matched", mode, seed)] = _write_run(
            tmp_path / f"{mode}{seed}", b4, "a red circle on the left", 0.5, mode)
    report = build_report(dirs, refs, spec, samples=50)
    rows = {r["attention"]: r for r in report["rows"]}
    # seed 1: additive 0.50 - blind 0.45 < 0.10 -> undertrained; dot 0.40 too.
    assert rows["additive"]["undertrained"] == [1] and rows["additive"]["counted"] == 1
    assert rows["additive"]["bleu4"]["mean"] == pytest.approx(0.60)
    (diff,) = report["diffs"]
    assert diff["seeds"] == [0] and diff["abs"]["mean"] == pytest.approx(0.20)
    assert diff["rel_pct"] == pytest.approx(50.0)
    md = build_markdown(report)
    assert "undertrained: seeds [1]; BLEU-4 0.500; entropy 1.00" in md and "+0.2000" in md
    # A mode undertrained at every seed: raw numbers in parentheses, no CI, never compared.
    assert rows["scaled_dot"]["counted"] == 0
    assert [u["bleu4"] for u in rows["scaled_dot"]["undertrained_runs"]] == [0.25, 0.30]
    line = next(x for x in md.splitlines() if "| scaled_dot |" in x)
    assert "(0.275 ± 0.035)" in line and "(0.500 ± 0.000)" in line and "(1.00 ± 0.00)" in line
    assert "[" not in line.split("undertrained")[0]  # no confidence interval for uncounted runs
    paths = save_plots(report, tmp_path)
    assert all(p.stat().st_size > 1000 for p in paths)
    assert report["machines"] == ["Xeon (amx)"] and report["feature_precisions"] == ["bfloat16"]
    assert md.startswith("Machine(s): Xeon (amx). Feature extraction precision: bfloat16.")
    assert "Commit(s): abc." in md and "combined" not in md  # one commit: nothing to explain
    assert ("Compute: 8 distinct runs; 12.00 CPU core-hours over 6 runs; 2.00 wall-clock hours "
            "over the other 2") in md


def test_a_pair_with_no_seed_counted_by_both_is_said_not_dropped(tmp_path):
    """dot collapsed at every seed (within the margin of blind): no difference can be formed,
    and the report says so with the uncounted runs' numbers instead of omitting the row."""
    ref = ["a", "red", "circle"]
    values = {("additive", 0): 0.60, ("dot", 0): 0.25, ("blind", 0): 0.20,
              ("additive", 1): 0.55, ("dot", 1): 0.28, ("blind", 1): 0.21}
    dirs = {Cell("lstm", "mismatched", m, s): _write_run(tmp_path / f"{m}{s}", b4, "a red circle", 0.5, m)
            for (m, s), b4 in values.items()}
    for s in (0, 1):
        res = dirs[Cell("lstm", "mismatched", "dot", s)] / "results.json"
        res.write_text(res.read_text().replace('"test/attn_entropy": 1.0', '"test/attn_entropy": 0.001')
                       .replace('"machine"', '"threads": 1, "machine"'))
    report = build_report(dirs, {1: [ref], 2: [ref]}, {**SPEC, "dims": ["mismatched"]}, samples=20)
    assert report["diffs"] == []
    (u,) = report["unpaired"]
    assert u["counted"] == {"additive": "2/2", "dot": "0/2"}
    md = build_markdown(report)
    assert ("No additive - dot difference for lstm / mismatched: no seed where both count. additive "
            "counted at 2/2 seeds; dot counted at 0/2 seeds (undertrained: BLEU-4 0.250, 0.280; "
            "entropy 0.00, 0.00).") in md
    assert "Xeon (amx) / 1 thread;" in md or "Xeon (amx) / 1 thread." in md


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_report_says_when_the_gpu_ratio_is_not_measured(tmp_path, device):
    dirs = {Cell("lstm", "matched", "additive", 0): _write_run(tmp_path / "a", 0.5, "a red circle", 0.5,
                                                               "additive")}
    tp = {"shapes": "batch 64", "device": device, "train_lstm_dot_over_additive_fp32": 1.10}
    md = build_markdown(build_report(dirs, {1: [["a"]], 2: [["a"]]}, SPEC, tp, samples=10))
    assert "- train_lstm_dot_over_additive_fp32: 1.10x" in md and "- device" not in md
    assert ("GPU dot/additive ratio is not measured yet" in md) == (device == "cpu")


def test_report_names_every_commit_and_flags_dirty_cells(tmp_path):
    ref = ["a", "red", "circle"]
    dirs = {Cell("lstm", "matched", "additive", s): _write_run(tmp_path / f"a{s}", 0.5, "a red circle",
                                                               0.5, "additive") for s in (0, 1)}
    results = dirs[Cell("lstm", "matched", "additive", 1)] / "results.json"
    results.write_text(results.read_text().replace('"abc"', '"def+dirty"'))
    md = build_markdown(build_report(dirs, {1: [ref], 2: [ref]}, {**SPEC, "dims": ["matched"]}, samples=20))
    assert "Commit(s): abc, def+dirty. Cells from 2 commits were combined" in md
    assert "dirty tree: seeds [1]" in next(x for x in md.splitlines() if "| additive |" in x)


def test_reruns_train_once_and_report_only_never_trains(tmp_path, monkeypatch):
    fake = FakeRuns()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    cell = Cell("lstm", "matched", "mixed", 0)  # reruns the cell mixed resolves to
    assert runner.rerun(cell, tmp_path / "verify" / "a", train_missing=False) is None
    assert fake.trained == []
    assert runner.rerun(cell, tmp_path / "verify" / "a")["test/bleu4"] == 0.5
    assert fake.trained == ["dot/512/0/False"]
    runner.rerun(cell, tmp_path / "verify" / "a")  # finished before: read back
    assert len(fake.trained) == 1


def test_verify_picks_cells_in_grid_order_and_reports_existing_reruns(tmp_path, monkeypatch):
    fake = FakeRuns()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    dirs = runner.run(expand_grid(SPEC))
    fake.trained.clear()
    assert runner.verify(dirs, 2, train_missing=False) == []  # report-only: nothing trained
    first = runner.verify(dirs, 2)
    # seed-major grid order, blind and mixed excluded: the same cells in every process
    assert [r["cell"] for r in first] == ["lstm/mismatched/additive/s0", "lstm/mismatched/dot/s0"]
    assert len(fake.trained) == 2
    assert runner.verify(dirs, 2, train_missing=False) == first  # read back, nothing trained
    assert len(runner.verify(dirs, 3)) == 3 and len(fake.trained) == 3


def _legacy_cell(root: Path, cfg: dict, name: str = "0ld", committed: bool = False) -> Path:
    """A finished cell as an older hash rule named it: results + a checkpoint with its config,
    or (committed: what a fresh clone has) results + cell.json, no checkpoint."""
    import torch

    from captioning.provenance import hashed_view

    cell = root / "cells" / name
    (cell / "checkpoints").mkdir(parents=True)
    (cell / "results.json").write_text(json.dumps({"test/bleu4": 0.4}))
    if committed:
        (cell / "cell.json").write_text(json.dumps(hashed_view(cfg)))
        return cell
    torch.save({"state_dict": {}, "hyper_parameters": {"format_version": 1, "cfg": cfg, "vocab": []}},
               cell / "checkpoints" / "best.ckpt")
    return cell


@pytest.mark.parametrize("committed", [False, True], ids=["checkpoint", "cell.json"])
def test_cells_named_by_an_older_hash_rule_are_adopted_not_retrained(tmp_path, monkeypatch, committed):
    """A finished cell whose stored config equals the cell's config on every key it has (keys
    added since are absent from it) is renamed to today's hash; one that differs is trained.
    A fresh clone has no checkpoints: the committed cell.json is enough."""
    fake = FakeRuns()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    cell = Cell("lstm", "matched", "dot", 0)
    plain = OmegaConf.to_container(runner.config(cell)[0], resolve=True)
    old = {k: v for k, v in plain.items() if k != "seed"}  # "seed" did not exist back then
    from captioning.provenance import config_hash

    # named as a grid names cells: by the hash of their config at the time (here without "seed")
    legacy = _legacy_cell(tmp_path, old, config_hash(old), committed=committed)
    changed = {**old, "encoder": {"name": "resnet50", "pca_dim": 64}}
    other = _legacy_cell(tmp_path, changed, config_hash(changed), committed=committed)
    rerun = tmp_path / "verify" / legacy.name  # its reproducibility rerun, named after it
    rerun.mkdir(parents=True)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    # A report (finished) finds it where it is and changes nothing on disk: reads do not write.
    assert GridRunner(fake.compose, [], tmp_path, DIMS).finished([cell]) == {cell: legacy}
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    dirs = GridRunner(fake.compose, [], tmp_path, DIMS).run([cell, Cell("lstm", "matched", "additive", 0)])
    assert not legacy.exists() and (dirs[cell] / "results.json").is_file()  # renamed, kept
    assert not rerun.exists() and (tmp_path / "verify" / dirs[cell].name).is_dir()  # and its rerun
    assert fake.trained == ["additive/512/0/False"]  # no legacy cell matches it: trained
    assert other.exists()  # pca_dim 64 is no cell of this grid: left alone
    # every cell of the grid now has its cell.json (written before training / from the checkpoint)
    assert all((d / "cell.json").is_file() for d in dirs.values())


def test_a_cell_killed_mid_training_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    fake = FakeRuns()
    resumed = []
    monkeypatch.setattr(grid_mod, "train", lambda cfg: (resumed.append(cfg.get("resume")),
                                                        fake.train(cfg)))
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    cell = Cell("lstm", "matched", "dot", 0)
    _, out = runner.config(cell)
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "last.ckpt").write_bytes(b"x")  # killed: a checkpoint, no results
    runner.run([cell, Cell("lstm", "matched", "additive", 0)])
    assert resumed == [str(out), None]


def test_a_cell_killed_under_an_older_config_is_adopted_and_resumed(tmp_path, monkeypatch):
    """A cell killed mid-training before a `git pull` that added config keys: renamed to
    today's hash and resumed from its checkpoint, not started again. While another process
    (an older checkout's grid) holds its lock it is left where it is and not trained twice."""
    from captioning.compare.lock import CellLock
    from captioning.provenance import config_hash, hashed_view

    fake = FakeRuns()
    resumed = []
    monkeypatch.setattr(grid_mod, "train", lambda cfg: (resumed.append(cfg.get("resume")),
                                                        fake.train(cfg)))
    cell = Cell("lstm", "matched", "dot", 0)
    plain = OmegaConf.to_container(GridRunner(fake.compose, [], tmp_path, DIMS).config(cell)[0],
                                   resolve=True)
    old = {k: v for k, v in plain.items() if k != "seed"}  # "seed" did not exist back then
    killed = tmp_path / "cells" / config_hash(old)
    (killed / "checkpoints").mkdir(parents=True)
    (killed / "checkpoints" / "last.ckpt").write_bytes(b"x")  # a checkpoint, no results
    (killed / "cell.json").write_text(json.dumps(hashed_view(old)))

    held = CellLock(killed)
    assert held.try_take() is None  # the older checkout's process is still training it
    try:
        dirs = GridRunner(fake.compose, [], tmp_path, DIMS).run([cell])
        assert killed.is_dir() and dirs == {} and resumed == []  # left to its trainer
    finally:
        held.release()
    dirs = GridRunner(fake.compose, [], tmp_path, DIMS).run([cell])
    assert not killed.exists() and dirs[cell].name != killed.name
    assert resumed == [str(dirs[cell])]  # resumed from the adopted checkpoint
    assert (dirs[cell] / "checkpoints" / "last.ckpt").read_bytes() == b"x"


def test_two_grids_over_one_root_never_train_a_cell_twice(tmp_path, monkeypatch, caplog):
    """Two processes over one results root: a cell another process is training is skipped (and
    left out of this report), one it finished after this grid listed its work is not redone,
    and the lock of a killed process is free at once (the kernel drops its flock)."""
    import subprocess
    import sys

    from captioning.compare.lock import LOCK, CellLock

    fake = FakeRuns()
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    busy, later, free = (Cell("lstm", "matched", m, 0) for m in ("additive", "dot", "blind"))
    outs = {c: runner.config(c)[1] for c in (busy, later, free)}
    for out in outs.values():
        out.mkdir(parents=True)

    def train_and_finish_later(cfg):  # meanwhile, "the other process" finishes `later`
        fake.train(cfg)
        (outs[later] / "results.json").write_text(json.dumps({"test/bleu4": 0.4}))

    monkeypatch.setattr(grid_mod, "train", train_and_finish_later)
    other = CellLock(outs[busy])
    assert other.try_take() is None
    # a killed process held `free`: its lock must not block anyone
    hold = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(outs[free] / LOCK)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert CellLock(outs[free]).try_take() is not None  # held while it lives
    holder.kill()
    holder.wait()
    with caplog.at_level("INFO"):
        dirs = runner.run([busy, free, later])
    assert fake.trained == ["additive/512/0/True"]  # only the blind cell (`free`) trained here
    assert "lstm/matched/additive/s0 is being trained by" in caplog.text
    assert "lstm/matched/dot/s0 was finished by another process meanwhile" in caplog.text
    assert set(dirs) == {free, later}  # the busy cell is not in this report
    other.release()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    assert set(runner.run([busy, free, later])) == {busy, free, later}
    assert fake.trained[1:] == ["additive/512/0/False"]


def test_cells_as_jobs_through_submitit(tmp_path, monkeypatch):
    """compare.executor: the cells go through submitit's submission path (its in-process debug
    executor here; `slurm` on a cluster), one job per missing cell, and the grid waits."""
    from captioning.compare.executor import job_parameters, make_executor

    fake = FakeRuns()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    executor = make_executor("debug", tmp_path / ".submitit")
    dirs = runner.run([Cell("lstm", "matched", "dot", 0), Cell("lstm", "matched", "additive", 0)],
                      executor)
    assert sorted(fake.trained) == ["additive/512/0/False", "dot/512/0/False"]
    assert all((d / "results.json").is_file() for d in dirs.values())
    # The job a cell asks SLURM for: the sweep launcher's defaults, overridable, submitit's names.
    params = job_parameters({"partition": "gpu", "timeout_min": 60})
    assert params == {"slurm_partition": "gpu", "timeout_min": 60, "nodes": 1, "tasks_per_node": 1,
                      "gpus_per_node": 1, "cpus_per_task": 8, "mem_gb": 64}
    with pytest.raises(ValueError, match="valid: local, slurm, debug"):
        make_executor("pbs", tmp_path)


def test_a_cells_job_submitted_again_while_it_trains_is_skipped(tmp_path, monkeypatch, caplog):
    """A cluster job takes its cell's lock as every trainer does: the grid command run again
    while the first one's job still trains a cell (its login shell died, say) submits a job that
    finds the cell held and leaves it; the other cells are trained."""
    from captioning.compare.executor import make_executor
    from captioning.compare.lock import CellLock

    fake = FakeRuns()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    busy, free = Cell("lstm", "matched", "dot", 0), Cell("lstm", "matched", "additive", 0)
    out = runner.config(busy)[1]
    out.mkdir(parents=True)
    first = CellLock(out)
    assert first.try_take() is None  # the first submission's job, still training
    try:
        with caplog.at_level("INFO"):
            dirs = runner.run([busy, free], make_executor("debug", tmp_path / ".submitit"))
    finally:
        first.release()
    assert fake.trained == ["additive/512/0/False"] and set(dirs) == {free}
    assert f"grid: {busy.label} is being trained by" in caplog.text


class _RanJob:
    """A submitit job that ran at submission: its result, or the error its process ended with."""

    def __init__(self, fn, *args):
        self.job_id, self.paths = "1", type("Paths", (), {"stderr": Path("1_0_log.err")})()
        try:
            self.value, self.error = fn(*args), None
        except Exception as err:  # noqa: BLE001
            # submitit's FailedJobError holds the job's traceback as text
            self.value, self.error = None, RuntimeError(
                f"Traceback (most recent call last):\n  File \"job.py\", line 1\n{type(err).__name__}: {err}")

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value


class RunAtSubmit:
    """An executor whose jobs run as they are submitted (submitit's own debug executor drops
    into pdb on a failure); `arrays`: the job arrays submitted, the directory of each job."""

    def __init__(self):
        self.arrays: list[list[str]] = []

    def batch(self):
        self.arrays.append([])
        return contextlib.nullcontext()

    def submit(self, fn, cfg, *args):
        self.arrays[-1].append(cfg.paths.output_dir)
        return _RanJob(fn, cfg, *args)


def test_with_workers_a_cells_folder_is_written_as_its_job_starts(tmp_path, monkeypatch):
    """compare.workers: a cell waiting for a free worker has no folder yet (a status lists it
    as not begun); its folder, cell.json and resume decision come as its job is submitted."""
    from captioning.compare import workers

    fake = FakeRuns()
    seen = []

    def run_parallel(todo, n, folder, on_submit=None, on_change=None):
        for item in todo:  # one worker's order
            seen.append(item[2].exists())
            _, cfg, out = on_submit(item)
            seen.append((out / "cell.json").is_file())
            fake.train(cfg)
        return []

    monkeypatch.setattr(workers, "run_parallel", run_parallel)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    dirs = runner.run([Cell("lstm", "matched", "dot", 0), Cell("lstm", "matched", "additive", 0)], workers=2)
    assert seen == [False, True, False, True] and len(fake.trained) == 2
    assert all((d / "results.json").is_file() for d in dirs.values())


def test_a_failed_cluster_job_is_named_and_the_other_jobs_results_are_kept(tmp_path, monkeypatch):
    """One cell's job fails: the grid still waits for the others, keeps their results, and
    names the failed cell with its error and its job's log (run.py then ends with one line per
    failed cell), as compare.workers does for a local job."""
    fake = FakeRuns()

    def train(cfg):
        if cfg.attention.name == "dot":
            raise ValueError("attention.nonsense: a broken setting")
        return fake.train(cfg)

    monkeypatch.setattr(grid_mod, "train", train)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    cells = [Cell("lstm", "matched", "dot", 0), Cell("lstm", "matched", "additive", 0)]
    dirs = runner.run(cells, RunAtSubmit())
    assert set(dirs) == {cells[1]} and fake.trained == ["additive/512/0/False"]
    (line,) = runner.failed
    assert line == "lstm/matched/dot/s0: ValueError: attention.nonsense: a broken setting (log: 1_0_log.err)"


def test_the_slurm_sweep_launcher_composes_without_a_cluster():
    """`python train.py -m hydra/launcher=slurm ...`: the job parameters Hydra's submitit
    launcher would submit (composed only; no SLURM here)."""
    from conftest import CONF_DIR
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                      return_hydra_config=True)
    GlobalHydra.instance().clear()
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.partition, launcher.gpus_per_node, launcher.tasks_per_node) == ("gpu", 1, 1)
    assert (launcher.timeout_min, launcher.cpus_per_task, launcher.mem_gb) == (720, 8, 64)


def test_report_only_on_no_cells_says_so_and_writes_nothing(tmp_path, caplog):
    """A fresh clone before any cell finished: no empty report.md, no crash in the plots."""
    from captioning.compare.run import run_comparison

    cfg = OmegaConf.create({"compare": {**SPEC, "name": "g", "root": str(tmp_path), "train": False,
                                        "benchmark": False, "dim_settings": DIMS}})
    with caplog.at_level("WARNING"):
        assert run_comparison(cfg, [], FakeRuns().compose) is None
    assert "no finished cells" in caplog.text and "compare.train=true" in caplog.text
    assert not any((tmp_path / "g").glob("*/report.md"))


class FakeExperiments(FakeRuns):
    """FakeRuns whose compose knows experiment presets (each with its compare block and encoder
    weights) and whose runs write predictions, so whole reports can be built."""

    def __init__(self, root: Path, weights: Path):
        super().__init__()
        self.root, self.weights = root, weights

    def compose(self, overrides):
        cfg = super().compose(overrides)
        name = dict(o.split("=", 1) for o in overrides).get("experiment", "main")
        trained = name == "trained"
        cfg.encoder.weights_path = str(self.weights) if trained else None
        cfg.compare = {**SPEC, "name": name, "root": str(self.root), "train": False,
                       "benchmark": False, "dim_settings": DIMS, "seeds": [0],
                       "sections": [] if trained else ["trained"]}
        cfg.data.synthetic = {"seed": 0}
        return cfg

    def train(self, cfg):
        super().train(cfg)
        preds = [{"image_id": "i1", "caption": "a red circle"}]
        (Path(cfg.paths.output_dir) / "predictions.json").write_text(json.dumps(preds))


def test_report_sections_hold_another_experiments_cells(tmp_path, monkeypatch, caplog):
    """compare.sections: the trained-encoder condition is a second table of the comparison's
    report, found by its own preset's config (never trained from there); a fresh clone without
    the weights file still finds those cells (matched on everything else, with a warning)."""
    from types import SimpleNamespace

    import captioning.compare.run as run_mod
    import captioning.compare.writers as writers_mod

    weights = tmp_path / "encoder.pth"
    weights.write_bytes(b"trained")
    fake = FakeExperiments(tmp_path, weights)
    monkeypatch.setattr(grid_mod, "train", fake.train)
    record = SimpleNamespace(image_id="i1", split="test", captions=[["a", "red", "circle"]])
    monkeypatch.setattr(writers_mod, "load_dataset_records", lambda data: ([record], None, None))
    for name in ("main", "trained"):
        spec = fake.compose([f"experiment={name}"]).compare
        compose = lambda extra, n=name: fake.compose([f"experiment={n}", *extra])  # noqa: E731
        GridRunner(compose, [], tmp_path / name, DIMS).run(expand_grid(spec))
    trained_runs = len(fake.trained) // 2
    cfg = fake.compose(["experiment=main"])
    out = run_mod.run_comparison(cfg, ["experiment=main"], fake.compose)
    report = (out / "report.md").read_text()
    assert "## trained" in report and "encoder.pth" in report and f"{trained_runs} finished runs" in report
    assert report.count("| lstm | matched | additive |") == 2  # one row per table
    assert (out / "trained_bleu4.png").is_file() and (out / "bleu4.png").is_file()
    assert json.loads((out / "report.json").read_text())["sections"]["trained"]["rows"]
    weights.unlink()  # a fresh clone: the weights file is git-ignored
    with caplog.at_level("WARNING"):
        again = run_mod.run_comparison(cfg, ["experiment=main"], fake.compose)
    assert f"{weights} absent here" in caplog.text
    assert (again / "report.md").read_text().count("| lstm | matched | additive |") == 2
    assert len(fake.trained) == 2 * trained_runs  # nothing trained by either report


def test_reruns_only_of_cells_from_this_cpu_kind(tmp_path, monkeypatch):
    fake = FakeRuns()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    cell = Cell("lstm", "matched", "dot", 0)
    dirs = runner.run([cell])
    (dirs[cell] / "results.json").write_text(json.dumps({"test/bleu4": 0.5, "machine": "Other CPU (avx2)"}))
    assert runner.verify(dirs, 1) == [] and len(fake.trained) == 1  # not re-trained here


def test_a_report_rebuilds_with_an_earlier_reports_throughput(tmp_path, monkeypatch):
    """compare.throughput_from: report-only rebuilds a report's Markdown exactly, benchmark
    ratios included, without measuring again; a missing file is refused before any training."""
    from types import SimpleNamespace

    import captioning.compare.run as run_mod
    import captioning.compare.writers as writers_mod
    from captioning.errors import UserError

    fake = FakeExperiments(tmp_path, tmp_path / "encoder.pth")
    monkeypatch.setattr(grid_mod, "train", fake.train)
    record = SimpleNamespace(image_id="i1", split="test", captions=[["a", "red", "circle"]])
    monkeypatch.setattr(writers_mod, "load_dataset_records", lambda data: ([record], None, None))
    cfg = fake.compose(["experiment=main"])
    GridRunner(fake.compose, [], tmp_path / "main", DIMS).run(expand_grid(cfg.compare))
    trained = len(fake.trained)
    measured = {"shapes": "batch 2", "device": "cpu", "lstm_dot_over_additive": 1.234}
    monkeypatch.setattr(writers_mod, "throughput", lambda spec: measured)
    cfg.compare.benchmark = True
    first = run_mod.run_comparison(cfg, ["experiment=main"], fake.compose)
    markdown = (first / "report.md").read_text()
    assert "lstm_dot_over_additive: 1.23x" in markdown

    monkeypatch.setattr(writers_mod, "throughput", lambda spec: pytest.fail("measured again"))
    cfg.compare.update(benchmark=False, throughput_from=str(first / "report.json"))
    again = run_mod.run_comparison(cfg, ["experiment=main"], fake.compose)
    assert (again / "report.md").read_text() == markdown

    cfg.compare.update(train=True, throughput_from=str(tmp_path / "nowhere" / "report.json"))
    with pytest.raises(UserError, match="compare.throughput_from=.*nowhere"):
        run_mod.run_comparison(cfg, ["experiment=main"], fake.compose)
    assert len(fake.trained) == trained  # refused before any cell trained


def test_a_grid_refuses_an_encoder_file_other_than_its_pinned_one(tmp_path, monkeypatch):
    """encoder.weights_sha256 (a learned-feature grid's one encoder file): a machine with another
    file (trained again: other bytes) is refused before any cell trains, the status included,
    since each of its cells would be a new cell beside the recorded ones; a machine without the
    file gets the status, and is refused training before any cell."""
    import captioning.compare.run as run_mod
    from captioning.errors import UserError

    weights = tmp_path / "encoder.pth"
    weights.write_bytes(b"weights trained again")
    fake = FakeExperiments(tmp_path, weights)
    monkeypatch.setattr(grid_mod, "train", fake.train)
    cfg = fake.compose(["experiment=trained"])
    cfg.encoder.update(pretrained=True, weights_sha256="ab" * 32)
    for status in (False, True):
        cfg.compare.update(train=True, status=status)
        with pytest.raises(UserError, match=r"encoder.weights_sha256=abababab.*Copy that file here"):
            run_mod.run_comparison(cfg, ["experiment=trained"], fake.compose)
    # no file at all: a status needs none; training is refused before its first cell
    weights.unlink()
    cfg.encoder.verify_weights = False
    run_mod.run_comparison(cfg, ["experiment=trained"], fake.compose)
    cfg.compare.status = False
    with pytest.raises(UserError, match=r"encoder.pth: no such file. It is your own weights file"):
        run_mod.run_comparison(cfg, ["experiment=trained"], fake.compose)
    assert fake.trained == []


def test_a_fresh_clone_takes_the_pinned_encoder_file_from_the_grids_record(tmp_path, monkeypatch):
    """A grid whose record keeps its encoder file (results/<grid>/encoder/): a machine without
    the file gets it from there, checked against the pin, and its cells train; a machine with
    another file is still refused (the record never overwrites a file)."""
    import captioning.compare.run as run_mod
    from captioning.compare.encoder_record import store
    from captioning.errors import UserError

    weights = tmp_path / "encoder.pth"
    weights.write_bytes(b"the grid's encoder" * 100)
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    store(weights, tmp_path / "trained" / "encoder", digest, part_bytes=500)
    weights.unlink()
    fake = FakeExperiments(tmp_path, weights)
    monkeypatch.setattr(grid_mod, "train", fake.train)
    cfg = fake.compose(["experiment=trained"])
    cfg.encoder.update(pretrained=True, verify_weights=False, weights_sha256=digest)
    cfg.compare.update(train=True)
    run_mod.run_comparison(cfg, ["experiment=trained"], fake.compose)
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == digest
    assert fake.trained
    weights.write_bytes(b"weights trained again")
    trained = len(fake.trained)
    with pytest.raises(UserError, match=r"other bytes than the recorded encoder.*move it aside"):
        run_mod.run_comparison(cfg, ["experiment=trained"], fake.compose)
    assert weights.read_bytes() == b"weights trained again" and len(fake.trained) == trained


def _committed(prefix: str = "results/") -> list[str]:
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    ls = subprocess.run(["git", "ls-files", prefix], cwd=repo, capture_output=True, text=True)
    return ls.stdout.split() if ls.returncode == 0 else []


# The experiments whose newest committed report must rebuild: preset -> its results folder
# (compare.name).
REBUILT = {"cross_modal": "cross_modal", "attention_zoo": "attention_zoo",
           "convergence_unpaired": "convergence"}
# The benchmark ratios: the committed report.json's own, unless the preset names its committed
# source (compare.throughput_from: convergence reads results/convergence/throughput.json).
OWN_THROUGHPUT = {"convergence_unpaired"}


@pytest.mark.parametrize("experiment", sorted(REBUILT))
def test_the_committed_report_rebuilds_from_committed_files(experiment, tmp_path):
    """Acceptance of the comparison: the newest committed report.md of each experiment is
    rebuilt byte for byte by report-only mode from what a fresh clone has (the committed cells'
    small files, the throughput ratios from committed files), with no training."""
    import os
    import shutil
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    files = _committed()
    folder = REBUILT[experiment]
    reports = sorted(f for f in files if f.startswith(f"results/{folder}/") and f.endswith("/report.md")
                     and "/sweep_" not in f)  # a sweep's own report is part of its grid's
    if not reports:
        pytest.skip("no committed report (or not a git checkout)")
    for f in files:
        if "/cells/" in f or "/verify/" in f:
            (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(repo / f, tmp_path / f)
    committed = repo / reports[-1]
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "scripts/compare.py", f"experiment={experiment}", "compare.train=false",
         "compare.benchmark=false", f"compare.root={tmp_path / 'results'}", "logger=csv"]
        + ([] if experiment in OWN_THROUGHPUT
           else [f"compare.throughput_from={committed.parent / 'report.json'}"]),
        cwd=repo, env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    rebuilt = sorted((tmp_path / "results" / folder).glob("*/report.md"))
    assert len(rebuilt) == 1 and rebuilt[0].read_text() == committed.read_text()


def test_every_committed_report_is_rebuilt_by_the_suite():
    """A new experiment's committed report joins REBUILT (else nothing checks that it rebuilds)."""
    have = {f.split("/")[1] for f in _committed() if f.endswith("/report.md") and "/cells/" not in f}
    # cross_modal_quick: an example output (its cells are not committed; docs cite its wall time)
    assert have <= set(REBUILT.values()) | {"cross_modal_quick"}, sorted(have - set(REBUILT.values()))


def test_a_gallery_of_cells_trains_again_only_the_ones_without_a_checkpoint(tmp_path, monkeypatch):
    """compare.gallery: the chosen cells side by side; a committed cell (no checkpoint) is
    trained again into gallery_runs/ for its attention, its own predictions.json still shown."""
    from captioning.compare import writers as writers_mod
    from captioning.errors import UserError

    fake = FakeRuns()
    monkeypatch.setattr(grid_mod, "train", fake.train)
    built = {}
    monkeypatch.setattr(writers_mod, "build_gallery", lambda folders, out, names, **kw: built.update(
        folders=folders, names=names, **kw) or {"images": 0, "runs": []})
    runner = GridRunner(fake.compose, [], tmp_path, DIMS)
    cells = [Cell("lstm", "matched", mode, 0) for mode in ("additive", "dot")]
    dirs = runner.run(cells)
    (dirs[cells[1]] / "checkpoints").mkdir()
    (dirs[cells[1]] / "checkpoints" / "best.ckpt").write_text("a trained cell's own")
    want = {"decoder": "lstm", "dims": "matched", "seed": 0, "attentions": ["additive", "dot"],
            "device": "auto"}
    with pytest.raises(UserError, match="forbids training it again"):
        writers_mod._gallery(want, runner, dirs, tmp_path / "g", train_missing=False)
    writers_mod._gallery(want, runner, dirs, tmp_path / "g", train_missing=True)
    assert fake.trained == ["additive/512/0/False", "dot/512/0/False", "additive/512/0/False"]
    assert built["folders"] == [dirs[c] for c in cells] and built["names"] == [c.label for c in cells]
    assert built["checkpoints"] == [tmp_path / "gallery_runs" / dirs[cells[0]].name / "checkpoints"
                                    / "best.ckpt", None]
    with pytest.raises(UserError, match="no finished cell lstm/matched/scaled_dot/s0"):
        writers_mod._gallery({**want, "attentions": ["scaled_dot"]}, runner, dirs, tmp_path / "g", True)


def test_a_sweep_runs_every_cell_at_each_rate_and_rates_give_each_cell_its_own():
    spec = completed({"attentions": ["additive", "dot"], "decoders": ["lstm"], "seeds": [0, 1],
            "dims": ["matched"], "blind": True}, Compare)
    sweep = expand_grid({**spec, "lrs": [1e-3, 1e-2]})
    assert len(sweep) == 2 * 3 * 2 and {c.lr for c in sweep} == {1e-3, 1e-2}
    rates = {"lstm/*/additive": 3e-3, "lstm/matched/dot": 1e-3, "*/*/dot": 5e-3}
    cells = {c.label: c for c in expand_grid({**spec, "rates": rates})}
    assert cells["lstm/matched/additive/s0/lr0.003"].lr == 3e-3
    assert cells["lstm/matched/dot/s1/lr0.001"].lr == 1e-3  # the more specific key wins
    assert cells["lstm/matched/blind/s0/lr0.003"].lr == 3e-3  # blind: additive's rate
    assert rate_for(rates, Cell("transformer", "matched", "dot", 0)) == 5e-3
    assert rate_for(rates, Cell("transformer", "matched", "additive", 0)) == 0.0  # base rate
    assert "optim.optimizer.lr=0.003" in cells["lstm/matched/additive/s0/lr0.003"].overrides(
        {"matched": []})
    base = Cell("lstm", "matched", "dot", 0).overrides({"matched": []})
    assert not any(o.startswith("optim.") for o in base)
    with pytest.raises(ValueError, match="decoder/dims/attention"):
        rate_for({"lstm/additive": 1e-3}, Cell("lstm", "matched", "additive", 0))


def _real_compose(experiment: str):
    """compose(overrides) for GridRunner from the shipped conf/ (compare.yaml + the preset)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    def make(overrides: list[str]):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"),
                                   version_base="1.3"):
            return compose("compare", overrides=[f"experiment={experiment}", *overrides])

    return make


def test_the_sweep_holds_out_its_seeds_and_differs_from_the_grid_only_by_seed_and_rate(tmp_path):
    """experiment=convergence_sweep trains at seeds no cell of experiment=convergence uses (a
    rate is never chosen on a seed whose test score the report quotes); a sweep cell at the
    grid's seed would be the grid's cell (one hash): rate and seed are all the sweep changes."""
    sweep_compose, grid_compose = _real_compose("convergence_sweep"), _real_compose("convergence")
    sweep_spec, grid_spec = sweep_compose([]).compare, grid_compose([]).compare
    assert set(sweep_spec.seeds).isdisjoint(grid_spec.seeds) and len(sweep_spec.seeds) == 2
    dims = OmegaConf.to_container(sweep_spec.dim_settings)
    sweep = GridRunner(sweep_compose, [], tmp_path, dims)
    grid = GridRunner(grid_compose, [], tmp_path, dims)
    chosen = Cell("lstm", "matched", "dot", 0, 1e-2)
    assert grid.config(chosen)[1] == sweep.config(chosen)[1]
    assert grid.config(chosen)[1] != grid.config(Cell("lstm", "matched", "dot", 0, 1e-3))[1]
    assert grid.config(chosen)[1] != grid.config(Cell("lstm", "matched", "dot", 5, 1e-2))[1]
    cfg = grid.config(chosen)[0]
    assert cfg.optim.optimizer.lr == 1e-2 and cfg.trainer.num_threads == 1
    assert cfg.optim.scheduler._target_.endswith("WarmupPlateau") and cfg.early_stopping.patience
    assert cfg.decoder.paired_init and cfg.early_stopping.smoothing == 3


def test_a_grid_whose_seeds_meet_its_held_out_sweep_is_refused():
    from captioning.compare.run import _check_conditions
    from captioning.errors import UserError

    spec = completed(OmegaConf.to_container(_real_compose("convergence")([]).compare, resolve=True),
                     Compare, "compare.")
    _check_conditions(spec)
    with pytest.raises(UserError, match=r"share seed\(s\) \[5\]"):
        _check_conditions({**spec, "seeds": [0, 5]})
    _check_conditions({**spec, "seeds": [0, 5], "sweep": {**spec["sweep"], "held_out": False}})


def test_general_is_in_the_convergence_grid_at_512_d_only():
    """The learned-projection control: q^T W k at equal widths, beside dot's projection at 2048-d."""
    spec = completed(OmegaConf.to_container(_real_compose("convergence")([]).compare, resolve=True),
                     Compare, "compare.")
    cells = expand_grid(spec)
    assert {c.dims for c in cells if c.attention == "general"} == {"matched"}
    assert {c.seed for c in cells if c.attention == "general"} == {0, 1, 2, 3, 4}


def test_the_shipped_sweep_covers_a_condition_whose_rate_depends_on_the_width():
    """Scaled dot chose different rates at 512-d and 2048-d, so native512 (512-d, not a PCA
    truncation) gets its own scaled-dot sweep (it chose 1e-3; matched's 3e-4 scored 0.016
    lower there); additive and dot chose one rate at both widths and take it there; the 2048-d
    conditions take the 2048-d rates."""
    from captioning.compare.run import at_chosen_rates

    def spec(experiment: str) -> dict:
        cfg = _real_compose(experiment)([]).compare
        return completed(OmegaConf.to_container(cfg, resolve=True), Compare, "compare.")

    old = spec("convergence_unpaired")
    swept = {(c.decoder, c.attention) for c in expand_grid({**old, **old["sweep"]})
             if c.dims == "native512"}
    assert swept == {("lstm", "scaled_dot")}
    grid = old
    cells = at_chosen_rates(grid, expand_grid(grid))
    native = {(c.attention, c.lr) for c in cells if c.decoder == "lstm" and c.dims == "native512"}
    assert native == {("additive", 3e-3), ("dot", 1e-3), ("scaled_dot", 1e-3)}
    matched = {c.lr for c in cells if (c.decoder, c.dims, c.attention) == ("lstm", "matched", "scaled_dot")}
    assert matched == {3e-4}
    for dims in ("grid7", "query_projected", "mismatched_whitened"):
        rates = {c.lr for c in cells if (c.decoder, c.dims, c.attention) == ("lstm", dims, "scaled_dot")}
        assert rates == {3e-3}, dims


def test_a_report_composes_cells_that_differ_in_seed_and_rate_once(tmp_path):
    """Report queries share one composition across seeds and rates (composing is most of a
    rebuild's time); every cell's directory (its config hash) is the one composing it alone
    gives, the one its training uses."""
    compose = _real_compose("convergence_unpaired")
    calls = []
    dims = OmegaConf.to_container(compose([]).compare.dim_settings)
    runner = GridRunner(lambda o: calls.append(o) or compose(o), ["trainer.max_epochs=3"], tmp_path, dims)
    cells = [Cell("lstm", d, m, s, lr) for d in ("matched", "query_projected") for m in ("dot", "additive")
             for s in (0, 3) for lr in (0.0, 3e-4, 1e-2)]
    shared = {c: runner.directory(c) for c in cells}
    assert len(calls) == 8  # dims x modes x (a rate set or the composed one)
    for c in cells:
        assert runner.config(c)[1] == shared[c], c.label  # as training composes it, whole
    assert len(set(shared.values())) == len(cells)
    assert len(calls) == 8 + len(cells)


def test_the_sweep_chooses_each_modes_rate_on_validation_alone(tmp_path):
    """The chosen rate is the best validation score's, whatever the test scores say; a mode
    with a rate still missing gets none yet; a choice at the range's edge is flagged."""
    from captioning.compare.sweep import sweep_markdown, sweep_report

    def cell(mode, lr, val, test):
        out = tmp_path / f"{mode}{lr}"
        out.mkdir()
        (out / "results.json").write_text(json.dumps({
            "best_score": val, "monitor": "val/bleu4", "best_epoch": 7, "epochs_trained": 12,
            "stopped_early_after": 12, "test/bleu4": test}))
        return Cell("lstm", "matched", mode, 0, lr), out

    lrs = [1e-3, 3e-3, 1e-2]
    dirs = dict([cell("additive", 1e-3, 0.50, 0.60), cell("additive", 3e-3, 0.52, 0.40),
                 cell("additive", 1e-2, 0.49, 0.30),
                 cell("dot", 1e-3, 0.45, 0.45), cell("dot", 3e-3, 0.44, 0.70),
                 cell("dot", 1e-2, 0.40, 0.90),
                 cell("scaled_dot", 1e-3, 0.55, 0.55), cell("scaled_dot", 1e-2, 0.51, 0.30)])
    report = sweep_report(dirs, lrs)
    # scaled_dot's 3e-3 has not finished: no rate yet, though 1e-3 leads among those that have
    assert report["rates"] == {"lstm/matched/additive": 3e-3, "lstm/matched/dot": 1e-3}
    assert [r["edge"] for r in report["rows"]] == [None, "lowest", None]
    text = sweep_markdown(report, lrs)
    assert "**0.5200 (ep 7/12)**" in text and "lstm/matched/dot: 0.001" in text
    assert "| 0.001 (lowest tried) |" in text and "| needs 0.003 |" in text
    assert "edge of the range tried" in text and "lstm/matched/dot (lowest)" in text
    assert "0.6" not in text and "0.7" not in text and "0.9" not in text  # no test score anywhere


def test_a_rate_has_a_mean_only_once_every_sweep_seed_has_finished_there(tmp_path):
    """Held-out seeds 5 and 6: a rate where only seed 5 has finished has no mean, stays needed,
    and cannot be chosen; its best seed-5 score is not set against two-seed means."""
    from captioning.compare.sweep import sweep_report

    lrs = [1e-3, 3e-3, 1e-2]
    scores = {(1e-3, 5): 0.50, (1e-3, 6): 0.48, (3e-3, 5): 0.56, (1e-2, 5): 0.47, (1e-2, 6): 0.45}
    dirs = {}
    for (lr, seed), val in scores.items():
        out = tmp_path / f"{lr}_{seed}"
        out.mkdir()
        (out / "results.json").write_text(json.dumps({"best_score": val, "monitor": "val/bleu4"}))
        dirs[Cell("lstm", "matched", "additive", seed, lr)] = out
    every = [Cell("lstm", "matched", "additive", seed, lr) for lr in lrs for seed in (5, 6)]
    (row,) = sweep_report(dirs, lrs, every)["rows"]
    assert row["chosen"] is None and row["needed"] == [3e-3]
    assert row["means"] == pytest.approx({"0.001": 0.49, "0.01": 0.46})
    # its second seed finished: now 3e-3 has a mean, and is chosen on both seeds
    out = tmp_path / "3e-3_6"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"best_score": 0.50, "monitor": "val/bleu4"}))
    dirs[Cell("lstm", "matched", "additive", 6, 3e-3)] = out
    assert sweep_report(dirs, lrs, every)["rates"] == {"lstm/matched/additive": 3e-3}
    # without the sweep's cells, each rate's finished seeds are all it has (a one-seed sweep)
    del dirs[Cell("lstm", "matched", "additive", 6, 3e-3)]
    assert sweep_report(dirs, lrs)["rates"] == {"lstm/matched/additive": 3e-3}


def test_a_choice_within_seed_noise_is_marked_and_each_rate_is_drawn(tmp_path):
    """The margin (chosen minus runner-up validation score) beside the seed std at the chosen
    rate: a margin below the std is "within" noise; the sweep figure draws a line per rate."""
    from captioning.compare.report_figures import save_sweep_curves
    from captioning.compare.sweep import add_margins, sweep_markdown, sweep_report

    def cell(mode, lr, val):
        out = tmp_path / f"{mode}{lr}"
        out.mkdir()
        curve = [{"epoch": e, "val/bleu4": val - 0.02 * abs(7 - e)} for e in range(1, 12)]
        (out / "results.json").write_text(json.dumps({
            "best_score": val, "monitor": "val/bleu4", "best_epoch": 7, "epochs_trained": 11,
            "stopped_early_after": 11, "val_curve": curve}))
        return Cell("lstm", "matched", mode, 0, lr), out

    lrs = [1e-3, 3e-3, 1e-2]
    dirs = dict([cell("additive", 1e-3, 0.515), cell("additive", 3e-3, 0.520), cell("additive", 1e-2, 0.47),
                 cell("dot", 1e-3, 0.49), cell("dot", 3e-3, 0.46), cell("dot", 1e-2, 0.43),
                 cell("scaled_dot", 1e-3, 0.50)])
    report = sweep_report(dirs, lrs)
    assert report["rows"][0]["rates"]["0.003"][0]["curve"][6] == [7, 0.520]
    add_margins(report, {"lstm/matched/additive": {"std": 0.004, "n": 5},
                         "lstm/matched/dot": {"std": 0.004, "n": 5}})
    additive, dot, scaled = report["rows"]
    assert additive["margin"]["runner_up"] == 1e-3 and additive["margin"]["diff"] == pytest.approx(0.005)
    assert dot["margin"]["runner_up"] == 3e-3 and dot["margin"]["diff"] == pytest.approx(0.03)
    assert "margin" not in scaled  # no rate chosen: nothing to weigh
    text = sweep_markdown(report, lrs)
    # the std of a difference of two seeds' scores: sqrt(2) x 0.004 = 0.0057
    assert "| +0.0050 vs 0.001; std 0.0057, 5 seeds (within) |" in text
    assert "| +0.0300 vs 0.003; std 0.0057, 5 seeds |" in text
    add_margins(report, {})  # before the grid's other seeds: the margin alone
    assert "+0.0050 vs 0.001 (seed std: one seed so far)" in sweep_markdown(report, lrs)
    assert save_sweep_curves(report, tmp_path).stat().st_size > 10_000
    assert save_sweep_curves({"rows": []}, tmp_path) is None


def test_a_rate_is_chosen_once_bracketed_and_names_the_rates_it_still_needs():
    """The best finished rate is chosen when the rates next to it finished lower and >= 3 rates
    spanning >= 10x finished: rates beyond it are not needed; until then the report names the
    rates that would decide it."""
    from captioning.compare.sweep import choose

    lrs = [3e-4, 1e-3, 3e-3, 1e-2]
    # interior and bracketed: 3e-4 is not needed
    assert choose({1e-3: 0.51, 3e-3: 0.52, 1e-2: 0.47}, lrs) == (3e-3, [])
    # best at 1e-3 with 3e-4 unrun: 3e-4 decides it (the optimum may lie below)
    assert choose({1e-3: 0.46, 3e-3: 0.45, 1e-2: 0.43}, lrs) == (None, [3e-4])
    # bracketed but only 2 rates (3.3x): more rates needed, all the unfinished ones
    assert choose({1e-3: 0.50, 3e-3: 0.52}, [1e-3, 3e-3, 1e-2]) == (None, [1e-2])
    assert choose({3e-4: 0.40, 1e-3: 0.46, 3e-3: 0.45}, lrs) == (1e-3, [])
    # an edge best is chosen once its one neighbour finished (the report flags the edge)
    assert choose({3e-4: 0.47, 1e-3: 0.46, 3e-3: 0.45}, lrs) == (3e-4, [])
    # ties go to the lower rate; nothing finished: every rate is needed
    assert choose({1e-3: 0.5, 3e-3: 0.5, 1e-2: 0.4, 3e-4: 0.3}, lrs) == (1e-3, [])
    assert choose({}, lrs) == (None, lrs)
    # a rate of 1e-3 alone: its neighbours first
    assert choose({1e-3: 0.5}, lrs) == (None, [3e-4, 3e-3])


def _convergence_cells(tmp_path, scores, same_captions=False):
    """Fake finished cells: scores {(dims, mode, seed): (bleu4 after 2 epochs, after 5 (None: the
    run stopped before), at best)}; captions per image that differ by mode unless same_captions."""
    refs = {i: [["a", "red", "circle", "on", "the", "left"], ["a", "red", "circle", "at", "the", "left"]]
            for i in range(8)}
    words = {"additive": "a red circle on the left", "dot": "a red square on the left",
             "scaled_dot": "a red circle at the top", "general": "a red circle on the right"}
    dirs = {}
    for (dims, mode, seed), (two, five, best) in scores.items():
        out = tmp_path / f"{dims}-{mode}-{seed}"
        out.mkdir()
        at = {"2": {"test/bleu4": two}} | ({"5": {"test/bleu4": five}} if five is not None else {})
        curve = [{"epoch": e, "val/bleu4": 0.1 * e} for e in range(1, 7)]
        (out / "results.json").write_text(json.dumps({
            "test/bleu4": best, "at_epoch": at, "best_epoch": 6, "epochs_trained": 10,
            "stopped_early_after": 10, "val_curve": curve, "git_commit": "abc", "threads": 1,
            "machine": "cpu", "machines": ["cpu"], "cpu_s": 3600, "train_precision": "32-true"}))
        caption = words["additive" if same_captions else mode] + ("" if seed % 2 else " now")
        names = ["predictions.json", "predictions_epoch2.json"]
        names += ["predictions_epoch5.json"] if five else []
        for name in names:
            (out / name).write_text(json.dumps([{"image_id": i, "caption": caption} for i in refs]))
        dirs[Cell("lstm", dims, mode, seed, 3e-3)] = out
    return dirs, {i: r for i, r in refs.items()}


WIDTH = ["mismatched_whitened", "matched"]  # the width's interaction (conf/experiment/convergence.yaml)


def test_the_convergence_report_pairs_by_seed_and_takes_the_difference_of_differences(tmp_path):
    from captioning.compare.convergence import convergence_report
    from captioning.compare.convergence_tables import convergence_markdown
    from captioning.compare.report_figures import save_curves

    rng = np.random.default_rng(0)
    scores = {(dims, mode, seed): (float(rng.uniform(0.2, 0.4)), None if seed == 2 and mode == "dot" else
                                   float(rng.uniform(0.3, 0.5)), float(rng.uniform(0.4, 0.6)))
              for dims in ("matched", "mismatched_whitened") for mode in ("additive", "dot", "scaled_dot")
              for seed in range(3)}
    dirs, refs = _convergence_cells(tmp_path, scores)
    report = convergence_report(dirs, refs, {"snapshot_epochs": [2, 5], "interactions": [WIDTH]}, samples=200)
    best = {k: v[2] for k, v in scores.items()}
    inter = next(i for i in report["interactions"] if (i["a"], i["b"]) == ("additive", "dot"))
    want = [(best[("mismatched_whitened", "additive", s)] - best[("mismatched_whitened", "dot", s)])
            - (best[("matched", "additive", s)] - best[("matched", "dot", s)]) for s in range(3)]
    assert inter["stages"]["best"]["per_seed"] == pytest.approx(want)
    assert inter["stages"]["5"] is None  # dot's seed 2 stopped before epoch 5: not reached
    gap = next(g for g in report["gaps"] if (g["dims"], g["a"], g["b"]) == ("matched", "additive", "dot"))
    two = {k: v[0] for k, v in scores.items()}
    assert gap["stages"]["2"]["per_seed"] == pytest.approx(
        [two[("matched", "additive", s)] - two[("matched", "dot", s)] for s in range(3)])
    text = convergence_markdown(report)
    assert not re.search(r"\bnan\b", text) and "not reached" in text
    row = "| lstm | mismatched_whitened − matched | additive − dot | at convergence | "
    assert row + " | ".join(f"{x:+.3f}" for x in want) + " |" in text  # the per-seed table
    assert "| lstm | mismatched_whitened − matched | additive − dot | after 5 epochs |" not in text
    assert f"| abc | 1 | cpu | 32-true | {tmp_path.parent.name} | 18 |" in text  # each cell's own record
    assert save_curves(report, tmp_path).stat().st_size > 10_000


def test_a_condition_on_anothers_features_borrows_the_modes_it_did_not_run(tmp_path):
    """compare.same_features: query_projected (dot only) takes additive from mismatched_whitened
    for its gap, paired by the seeds both ran, and is set against mismatched_whitened's dot (the
    projection's effect); an interaction may pair conditions through the borrowed mode too."""
    from captioning.compare.convergence import convergence_report
    from captioning.compare.convergence_tables import convergence_markdown

    rng = np.random.default_rng(1)
    scores = {("mismatched_whitened", mode, seed): (0.3, 0.4, float(rng.uniform(0.4, 0.6)))
              for mode in ("additive", "dot", "scaled_dot") for seed in range(3)}
    scores |= {("query_projected", "dot", seed): (0.3, 0.4, float(rng.uniform(0.4, 0.6)))
               for seed in range(2)}
    dirs, refs = _convergence_cells(tmp_path, scores)
    spec = {"snapshot_epochs": [2, 5], "same_features": {"query_projected": "mismatched_whitened"},
            "interactions": [["query_projected", "mismatched_whitened"]]}
    report = convergence_report(dirs, refs, spec, samples=100)
    best = {k: v[2] for k, v in scores.items()}
    gaps = {(g["dims"], g["a"], g["a_dims"], g["b"], g["b_dims"]): g for g in report["gaps"]}
    borrowed = gaps[("query_projected", "additive", "mismatched_whitened", "dot", "query_projected")]
    assert borrowed["seeds"] == [0, 1]
    assert borrowed["stages"]["best"]["per_seed"] == pytest.approx(
        [best[("mismatched_whitened", "additive", s)] - best[("query_projected", "dot", s)] for s in (0, 1)])
    projection = gaps[("query_projected", "dot", "query_projected", "dot", "mismatched_whitened")]
    assert projection["stages"]["best"]["per_seed"] == pytest.approx(
        [best[("query_projected", "dot", s)] - best[("mismatched_whitened", "dot", s)] for s in (0, 1)])
    # (additive − dot(query)) − (additive − dot(key)) = dot(key) − dot(query)
    [inter] = report["interactions"]
    assert inter["stages"]["best"]["per_seed"] == pytest.approx(
        [-x for x in projection["stages"]["best"]["per_seed"]])
    text = convergence_markdown(report)
    assert "| lstm | query_projected | additive (mismatched_whitened) − dot | 2 |" in text
    assert "| lstm | query_projected | dot − dot (mismatched_whitened) | 2 |" in text
    assert "| lstm | query_projected − mismatched_whitened | additive − dot | 2 |" in text
    # query_projected's scaled dot has not run: no row of its made wholly of borrowed cells
    assert all("query_projected" in (g["a_dims"], g["b_dims"]) for g in report["gaps"]
               if g["dims"] == "query_projected")
    assert "| lstm | query_projected | additive (mismatched_whitened) − scaled_dot" not in text
    assert [(i["a"], i["b"]) for i in report["interactions"]] == [("additive", "dot")]


def test_the_learned_projection_control_sets_a_mode_against_another_in_another_condition(tmp_path):
    """compare.controls: general at 512-d − dot at 512-d and − dot at 2048-d, paired by seed,
    in a table of their own (and the per-seed table); the gaps and the verdict's rows unchanged."""
    from captioning.compare.convergence import convergence_report
    from captioning.compare.convergence_tables import convergence_markdown

    rng = np.random.default_rng(2)
    scores = {(dims, mode, seed): (0.3, 0.4, float(rng.uniform(0.4, 0.6)))
              for dims in ("matched", "mismatched_whitened") for mode in ("additive", "dot")
              for seed in range(3)}
    scores |= {("matched", "general", seed): (0.3, 0.4, float(rng.uniform(0.4, 0.6))) for seed in range(3)}
    dirs, refs = _convergence_cells(tmp_path, scores)
    spec = {"snapshot_epochs": [2, 5], "interactions": [WIDTH]}
    plain = convergence_report(dirs, refs, spec, samples=100)
    spec["controls"] = [["matched", "general", "matched", "dot"],
                        ["matched", "general", "mismatched_whitened", "dot"],
                        ["mismatched_whitened", "general", "matched", "dot"]]  # general never ran at 2048-d
    report = convergence_report(dirs, refs, spec, samples=100)
    best = {k: v[2] for k, v in scores.items()}
    assert [(c["a_dims"], c["b_dims"]) for c in report["controls"]] == [
        ("matched", "matched"), ("matched", "mismatched_whitened")]
    across = report["controls"][1]
    assert across["seeds"] == [0, 1, 2]
    assert across["stages"]["best"]["per_seed"] == pytest.approx(
        [best[("matched", "general", s)] - best[("mismatched_whitened", "dot", s)] for s in range(3)])
    assert report["gaps"] == plain["gaps"] and "controls" not in plain
    text = convergence_markdown(report)
    assert "### The learned-projection control" in text
    assert "| lstm | matched | general − dot | 3 |" in text
    assert "| lstm | matched | general − dot (mismatched_whitened) | 3 |" in text
    per_seed = " | ".join(f"{x:+.3f}" for x in across["stages"]["best"]["per_seed"])
    assert f"| lstm | matched | general − dot (mismatched_whitened) | at convergence | {per_seed} |" in text
    assert "learned-projection" not in convergence_markdown(plain)


def test_report_conditions_must_be_the_grids():
    """A misspelt condition in compare.interactions or same_features stops the run before any
    cell trains, naming the key and the conditions there are."""
    from captioning.compare.run import _check_conditions
    from captioning.errors import UserError

    spec = {"dim_settings": {"matched": [], "mismatched_whitened": []}, "interactions": [WIDTH],
            "same_features": {}}
    _check_conditions(spec)
    with pytest.raises(UserError, match=r"compare.interactions\[0\].*matched, mismatched_whitened"):
        _check_conditions({**spec, "interactions": [["mismatched_whitend", "matched"]]})
    with pytest.raises(UserError, match=r"compare.interactions\[0\]"):
        _check_conditions({**spec, "interactions": [["matched"]]})
    with pytest.raises(UserError, match=r"compare.same_features.query_projected"):
        _check_conditions({**spec, "same_features": {"query_projected": "mismatched_whitened"}})
    spec |= {"attentions": ["additive", "dot", "general"],
             "controls": [["matched", "general", "mismatched_whitened", "dot"]]}
    _check_conditions(spec)
    _check_conditions({**spec, "attentions": ["additive", "dot"]})  # its controls' cells not in this run
    with pytest.raises(UserError, match=r"compare.controls\[0\].*attention modes"):
        _check_conditions({**spec, "controls": [["matched", "genral", "mismatched_whitened", "dot"]]})
    with pytest.raises(UserError, match=r"compare.controls\[0\]"):
        _check_conditions({**spec, "controls": [["matched", "general", "dot"]]})


def test_identical_captions_give_a_zero_image_interval(tmp_path):
    """The image bootstrap resamples the same images for both modes: equal captions, zero width."""
    from captioning.compare.convergence import convergence_report

    scores = {(dims, mode, seed): (0.3, 0.4, 0.5) for dims in ("matched", "mismatched_whitened")
              for mode in ("additive", "dot") for seed in range(2)}
    dirs, refs = _convergence_cells(tmp_path, scores, same_captions=True)
    report = convergence_report(dirs, refs, {"snapshot_epochs": [2, 5], "interactions": [WIDTH]}, samples=100)
    assert report["interactions"]
    for g in report["gaps"] + report["interactions"]:
        assert g["stages"]["best"]["boot"] == (0.0, 0.0)


def test_limits_keep_a_dims_or_a_decoder_to_fewer_cells():
    spec = completed({"attentions": ["additive", "dot"], "decoders": ["lstm", "transformer"],
                      "seeds": [0, 1, 2], "dims": ["matched", "wide", "query"], "blind": False,
                      "dim_limits": {"query": {"attentions": ["dot"], "seeds": [0]}},
                      "decoder_limits": {"transformer": {"dims": ["wide"], "seeds": [0, 1]}}}, Compare)
    cells = set(expand_grid(spec))
    assert {c for c in cells if c.dims == "query"} == {Cell("lstm", "query", "dot", 0)}
    assert {(c.dims, c.seed) for c in cells if c.decoder == "transformer"} == {("wide", 0), ("wide", 1)}
    assert len(cells) == 2 * 3 * 2 + 1 + 2 * 2  # lstm matched+wide, lstm query, transformer wide


def test_longest_wait_is_the_patience_a_run_needed():
    from captioning.compare.convergence import longest_wait

    curve = [{"val/bleu4": x} for x in (0.1, 0.3, 0.2, 0.25, 0.29, 0.31, 0.30, 0.2)]
    assert longest_wait(curve) == 3  # three below 0.3, then 0.31; the trailing two never ended
    assert longest_wait([]) == 0 and longest_wait([{"val/bleu4": 0.2}] * 4) == 0


def test_a_grid_with_a_sweep_trains_only_cells_whose_rate_was_chosen():
    """experiment=convergence before its sweep chose a mode's rate: that mode's cells are left
    out (never trained at the base rate); no rate at all is a message naming the sweep."""
    from captioning.compare.run import at_chosen_rates
    from captioning.errors import UserError

    spec = {"attentions": ["additive", "dot"], "decoders": ["lstm"], "seeds": [0, 1],
            "dims": ["matched"], "blind": False, "dim_limits": {}, "decoder_limits": {},
            "lrs": None, "sweep": {"lrs": [1e-3, 3e-3]}, "rates": {"lstm/*/additive": 3e-3}}
    cells = at_chosen_rates(spec, expand_grid(spec))
    assert [(c.attention, c.seed, c.lr) for c in cells] == [("additive", 0, 3e-3), ("additive", 1, 3e-3)]
    with pytest.raises(UserError, match="run its learning-rate sweep first"):
        at_chosen_rates({**spec, "rates": {}}, expand_grid({**spec, "rates": {}}))
    assert at_chosen_rates(spec, []) == []  # an empty grid is not a missing rate
    # no sweep named (the fixed-budget grids): every cell, at the base rate
    plain = {**spec, "sweep": None, "rates": {}}
    assert len(at_chosen_rates(plain, expand_grid(plain))) == 4
    # the sweep itself (compare.lrs): every cell at each rate
    sweep = {**spec, "lrs": [1e-3, 3e-3], "rates": {}}
    assert len(at_chosen_rates(sweep, expand_grid(sweep))) == 8


def test_a_local_sweep_trains_only_the_rates_that_decide_each_choice(tmp_path, monkeypatch):
    """compare.bracket: each mode's middle rate first, then its best's neighbours until the best
    is bracketed; a rate beyond it is never trained. Modes take turns."""
    import math

    from captioning.compare.plan import SweepPlan
    from captioning.compare.sweep import sweep_report

    def train_bracketed(runner, cells, lrs):
        return runner.run_plan(SweepPlan(runner, cells, lrs))

    peaks = {"additive": 3e-3, "dot": 3e-4}  # validation peaks inside and at the low edge
    fake = FakeRuns()
    trained = []

    def compose(overrides):
        cfg = fake.compose(overrides)
        kv = dict(o.split("=", 1) for o in overrides)
        cfg.optim.optimizer.lr = float(kv.get("optim.optimizer.lr", 0))
        return cfg

    def train(cfg):
        lr, mode = cfg.optim.optimizer.lr, cfg.attention.name
        trained.append((mode, lr))
        score = 0.5 - 0.1 * (math.log10(lr) - math.log10(peaks[mode])) ** 2
        out = Path(cfg.paths.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps({
            "best_score": score, "monitor": "val/bleu4", "best_epoch": 3, "epochs_trained": 7}))

    monkeypatch.setattr(grid_mod, "train", train)
    lrs = [3e-4, 1e-3, 3e-3, 1e-2]
    spec = completed({"attentions": ["additive", "dot"], "decoders": ["lstm"], "seeds": [0],
                      "dims": ["matched"], "blind": False, "lrs": lrs}, Compare)
    cells = expand_grid(spec)
    runner = GridRunner(compose, [], tmp_path, DIMS)
    done = train_bracketed(runner, cells, lrs)
    assert trained == [("additive", 1e-3), ("dot", 1e-3), ("additive", 3e-3), ("dot", 3e-3),
                       ("additive", 1e-2), ("dot", 3e-4)]
    report = sweep_report(done, lrs)
    assert report["rates"] == {"lstm/matched/additive": 3e-3, "lstm/matched/dot": 3e-4}
    assert train_bracketed(runner, cells, lrs) == done and len(trained) == 6  # nothing left to train
