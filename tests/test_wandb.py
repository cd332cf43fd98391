"""wandb (offline, read back from the run's own files), TensorBoard, the mode rules, the fallback
when wandb cannot reach a server, and that keys never reach the run's files."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from captioning.lit import train
from captioning.lit.loggers import wandb_mode
from captioning.provenance import flatten

WANDB_BIN = str(Path(sys.executable).with_name("wandb"))


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """No key, no netrc, no WANDB_MODE; every wandb cache inside tmp_path."""
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("")
    monkeypatch.setenv("NETRC", str(netrc))
    for var, sub in (("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config"),
                     ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / sub))
    return tmp_path


def read_run(run_dir: Path) -> list[dict]:
    """The records of an offline run, decoded by wandb's own reader (`wandb leet inspect`)."""
    (log_file,) = run_dir.glob("run-*.wandb")
    out = subprocess.run([WANDB_BIN, "leet", "inspect", "--json", str(log_file)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_mode_rules(wandb_env, monkeypatch):
    netrc = wandb_env / "netrc"
    assert wandb_mode("auto")[0] == "offline"
    assert wandb_mode("online")[0] == "online"  # logger.mode is explicit
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    assert wandb_mode("auto")[0] == "online"  # `wandb login` stored a key
    netrc.write_text("")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert wandb_mode("auto")[0] == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode("online") == ("disabled", "WANDB_MODE")
    assert flatten({"a": {"b": 1, "c": {"d": [1]}}, "e": {}}) == {"a.b": 1, "a.c.d": [1], "e": {}}


def test_offline_run_holds_config_metrics_table_and_figures(tiny_cfg, wandb_env, caplog):
    """logger=all: wandb offline (auto, no key) + TensorBoard + CSV from one tiny training."""
    cfg = tiny_cfg("logger=all", "trainer.max_epochs=2", "media.num_samples=4",
                   "media.num_attention=2", "trainer.num_sanity_val_steps=1",
                   "logger.wandb.log_model=true")
    with caplog.at_level(logging.INFO):
        results = train(cfg)
    out = Path(cfg.paths.output_dir)
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    hints = [r.message for r in caplog.records if "wandb sync" in r.message]
    assert hints and str(run_dir.resolve()) in hints[-1]  # where it is, how to sync it

    records = read_run(run_dir)
    run = next(r["run"] for r in records if r["type"] == "run")
    assert run["display_name"] == "additive-lstm-resnet18-synthetic-s0"
    assert run["run_group"] == "additive"
    assert "decoder=lstm" in run["tags"] and "seed=0" in run["tags"]
    config = {}
    for r in records:
        if r["type"] in ("run", "config"):
            config.update((r.get("run", r).get("config") or r.get("config", {})).get("update", {}))
    assert config["attention.name"] == "additive" and config["decoder.hidden_dim"] == 64
    assert config["optim.optimizer.lr"] == 5e-3 and "vocab" not in config  # flat, no vocabulary
    assert not [k for k in config if k.endswith(("_target_", "_partial_"))]  # no Hydra plumbing
    # Media entries are stored flat: "val/samples._type", "val/samples.path", ...
    history = {k.split(".")[0] for r in records if r["type"] == "history" for k in r["history"]["item"]}
    for key in ("train/loss", "train/captions_per_s", "train/images_per_s", "lr-AdamW",
                "val/bleu4", "val/attn_entropy", "test/bleu4", "val/samples"):
        assert key in history, key
    assert len({k for k in history if k.startswith("val/attention/")}) == 2  # fixed images
    summary = {}
    for r in records:
        if r["type"] == "summary":
            summary.update(r["summary"].get("update", {}))
    assert summary["test/bleu4"] == pytest.approx(results["test/bleu4"])
    assert summary["config_hash"] == results["config_hash"]

    # Media: one table and 2 attention figures per validation epoch (2 epochs, no sanity one).
    tables = sorted((run_dir / "files/media/table/val").glob("samples_*.table.json"))
    assert len(tables) == 2
    table = json.loads(tables[0].read_text())
    assert table["columns"] == ["epoch", "image_id", "image", "generated", "references"]
    assert len(table["data"]) == 4 and all(row[4] for row in table["data"])
    figures = list((run_dir / "files/media/images/val/attention").glob("*.png"))
    assert len(figures) == 4  # 2 images x 2 epochs

    # TensorBoard: scalars, the same attention figures, the caption table as text.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # one event dir per run, named like the wandb run (readable in `--logdir outputs`)
    assert [p.name for p in (out / "tensorboard").iterdir()] == [cfg.run_name]
    acc = EventAccumulator(str(out / "tensorboard" / cfg.run_name), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    assert "val/bleu4" in tags["scalars"] and "train/loss" in tags["scalars"]
    assert len([t for t in tags["images"] if t.startswith("val/attention/")]) == 2
    assert any(t.startswith("val/samples") for t in tags["tensors"])
    assert (out / "csv" / "metrics.csv").exists()

    # log_model: the artifact's files are staged inside the run dir (hard links: no extra disk),
    # never copied into wandb's staging or cache dirs under the home directory.
    (staged,) = (out / "artifacts").glob("model-*")
    assert sorted(p.name for p in staged.iterdir()) == ["model.ckpt", "results.json", "vocab.json"]
    best = out / "checkpoints" / "best.ckpt"
    assert (staged / "model.ckpt").stat().st_ino == best.stat().st_ino
    home = wandb_env / "wandb-home"
    assert not [p for p in home.rglob("*") if p.is_file() and p.stat().st_size > 100_000]
    assert any(r["type"] == "artifact" for r in records)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on exit: connections are refused


def test_unreachable_server_falls_back_offline_and_keys_stay_out(tiny_cfg, wandb_env, monkeypatch,
                                                                 caplog):
    secret = "secretkey" + "x" * 31
    monkeypatch.setenv("WANDB_API_KEY", secret)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    cfg = tiny_cfg("logger=wandb", "trainer.max_epochs=1", "media.num_samples=2")
    with caplog.at_level(logging.INFO):
        results = train(cfg)
    assert "test/bleu4" in results
    warnings = [r.message for r in caplog.records if "could not start online" in r.message]
    assert len(warnings) == 1  # said once
    out = Path(cfg.paths.output_dir)
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    records = read_run(run_dir)
    history = {k for r in records if r["type"] == "history" for k in r["history"]["item"]}
    assert "val/bleu4" in history and "test/bleu4" in history
    def when(text: str) -> float:
        return next(r.created for r in caplog.records if text in r.message)

    assert when("could not start online") - when("wandb: starting") < 30  # the fallback's cost
    # The key is in no file the run wrote (logs, config, the binary run record, media).
    for path in out.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_a_resumed_run_continues_its_wandb_run(tiny_cfg, monkeypatch):
    """resume: the same wandb run id (offline: a second offline-run dir with that id, which
    `wandb sync` uploads into the one run), and TensorBoard/CSV keep their folders."""
    import json

    monkeypatch.setenv("WANDB_MODE", "offline")  # whatever the shell running the suite says

    cfg = tiny_cfg("logger=all", "trainer.max_epochs=1", "decode.beam_size=1")
    train(cfg)
    out = Path(cfg.paths.output_dir)
    first = json.loads((out / "run.json").read_text())["wandb_id"]
    train(tiny_cfg("logger=all", "trainer.max_epochs=2", "decode.beam_size=1", f"resume={out}"))
    assert json.loads((out / "run.json").read_text())["wandb_id"] == first
    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(r.name.endswith(f"-{first}") for r in runs)
    import csv

    rows = list(csv.DictReader((out / "csv" / "metrics.csv").open()))
    assert {r["epoch"] for r in rows if r.get("val/bleu4")} == {"0", "1"}  # one file, both epochs


def test_sweep_jobs_and_debug_runs_are_labelled(tmp_path, data_dir, wandb_env):
    """A multirun's jobs carry the sweep id as a tag and sweep id + job number in their names;
    debug runs carry the tag `debug`."""
    from conftest import TINY

    args = ["-m"] + [a for a in TINY if not a.startswith(("logger=", "trainer.max_epochs"))] + [
        "logger=all", "debug=fast", "seed=0,1", "decode.beam_size=1",
        f"paths.data_dir={data_dir}", f"paths.log_dir={tmp_path}"]
    proc = subprocess.run([sys.executable, "train.py", *args], cwd=Path(__file__).parents[1],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (sweep,) = (tmp_path / "debug" / "multiruns").iterdir()
    runs = sorted((tmp_path / "debug" / "multiruns").glob("*/*/wandb/offline-run-*"))
    assert len(runs) == 2
    for job, run_dir in enumerate(runs):
        run = next(r["run"] for r in read_run(run_dir) if r["type"] == "run")
        assert run["display_name"].endswith(f"-{sweep.name}-{job}")
        assert f"sweep={sweep.name}" in run["tags"] and "debug" in run["tags"]
        # TensorBoard lists <job dir>/tensorboard/<the same name>
        (tb,) = (run_dir.parents[1] / "tensorboard").iterdir()
        assert tb.name == run["display_name"]
    assert "litlogger" not in proc.stdout + proc.stderr  # Lightning's advertisement is gone
