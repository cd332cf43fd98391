"""Stand-ins for a cell's training, run by tests/test_workers.py in compare.workers' job
processes (importable there through PYTHONPATH): each records what its process sees."""

import json
import os
import signal
import time
from pathlib import Path


def record_cell(cfg, out) -> str:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    if cfg.get("die"):
        os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does
    time.sleep(float(cfg.get("sleep", 1.5)))
    if cfg.get("broken"):
        raise ValueError(f"a broken setting: {cfg.broken}")
    (out / "results.json").write_text(json.dumps({
        "pid": os.getpid(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "threads": os.environ.get("OMP_NUM_THREADS"), "start": start, "end": time.time()}))
    return "trained"


def scored_cell(cfg, out) -> str:
    """A sweep's cell: its validation score peaks at the rate cfg.peaks gives its mode."""
    import math

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    time.sleep(float(cfg.get("sleep", 1.0)))
    lr, mode = float(cfg.optim.optimizer.lr), cfg.attention.name
    score = 0.5 - 0.1 * (math.log10(lr) - math.log10(cfg.peaks[mode])) ** 2
    (out / "results.json").write_text(json.dumps({
        "best_score": score, "monitor": "val/bleu4", "best_epoch": 1, "epochs_trained": 2,
        "test/bleu4": score, "lr": lr, "seed": int(cfg.seed), "start": start, "end": time.time()}))
    return "trained"


def before_training_cell(cfg, out) -> str:
    """compare.workers' own cell_job around a stand-in for what a cell does before its first
    step (composing, reading the store): it writes its pid to <out>/started, then works
    cfg.sleep seconds and finishes."""
    import captioning.lit as lit
    from captioning.compare.workers import cell_job

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    def train(cfg) -> None:
        (out / "started").write_text(str(os.getpid()))
        time.sleep(float(cfg.get("sleep", 1.5)))
        (out / "results.json").write_text(json.dumps({"pid": os.getpid()}))

    lit.train = train  # cell_job imports it from there when it runs
    return cell_job(cfg, out)


def logging_cell(cfg, out) -> str:
    """compare.workers' own cell_job around a stand-in training that logs an epoch line, as
    console.EpochLine does, and a debug line (below the log's level)."""
    import logging

    import captioning.lit as lit
    from captioning.compare.workers import cell_job

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    def train(cfg) -> None:
        log = logging.getLogger("captioning.lit.console")
        log.info("epoch 1/3: val/bleu4 0.4100 (new best), val/attr_acc 0.611, 38 s")
        log.debug("a debug line")
        (out / "results.json").write_text(json.dumps({"pid": os.getpid()}))

    lit.train = train
    return cell_job(cfg, out)
