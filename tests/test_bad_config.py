"""The bad-config corpus: every mistake the config alone shows fails in train() with one clear
sentence naming the key, before any data work (a spy on the data preparation entry points
proves nothing started). docs/troubleshooting.md lists the same cases."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from captioning.lit import train
from captioning.lit.config_check import ConfigError, check_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_data_work(monkeypatch):
    """Fails the test if data generation, feature extraction or loading starts."""
    from captioning.lit import datamodule

    calls = []
    for name in ("dataset_features", "prepare_data"):
        monkeypatch.setattr(datamodule, name, lambda *a, _n=name, **k: calls.append(_n))
    yield calls
    assert calls == [], f"data work started: {calls}"


CASES = {  # name: (overrides, the message it must give)
    "typo_in_a_section_name": (["+atention.dim=5"], r"atention\.dim: unknown key"),
    "key_the_attention_mode_does_not_have": (
        ["+attention.dim=5"],
        r"attention\.dim: unknown key.*valid for attention=additive: attn_dim, init, name"),
    "trainer_typo_gets_the_closest_argument": (
        ["+trainer.acumulate_grad_batches=2"],
        r"not an argument of pytorch_lightning.Trainer.*'accumulate_grad_batches'"),
    "optimizer_kwarg_checked_against_its_class": (
        ["+optim.optimizer.betas2=[0.9,0.99]"],
        r"optim\.optimizer\.betas2: torch.optim.AdamW takes no 'betas2'.*'betas'"),
    "beam_size_zero": (["decode.beam_size=0"], r"decode\.beam_size=0: must be an integer >= 1"),
    "negative_epochs": (["trainer.max_epochs=-1"], r"trainer\.max_epochs=-1: must be an integer >= 1"),
    "negative_learning_rate": (["optim.optimizer.lr=-0.1"], r"optim\.optimizer\.lr=-0.1: must be > 0"),
    "zero_batch_size": (["data.batch_size=0"], r"data\.batch_size=0: must be an integer >= 1"),
    "pca_wider_than_the_features": (
        ["encoder.pca_dim=99999"],
        r"encoder\.pca_dim=99999: must be null or 1\.\.512 \(resnet18 features are 512-d\)"),
    "attention_that_needs_equal_widths": (
        ["attention=dot", "attention.project=none"],
        r"attention=dot decoder=lstm encoder=resnet18: .*project"),
    "bad_nan_policy": (["trainer.nan_policy=ignore"], r"trainer\.nan_policy='ignore': must be stop or skip"),
    "zero_threads": (["trainer.num_threads=0"], r"trainer\.num_threads=0: must be null or an integer >= 1"),
    "snapshot_epoch_zero": (["checkpoint.snapshot_epochs=[0,2]"],
                            r"checkpoint\.snapshot_epochs=\[0, 2\]: must be a list of epochs"),
    "init_from_a_missing_file": (
        ["init_from=/nonexistent/x.ckpt"], r"init_from=/nonexistent/x\.ckpt: no such file"),
    "resume_and_init_from_together": (
        ["resume=auto", "init_from=/nonexistent/x.ckpt"], r"resume and init_from together"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_config_fails_before_any_work(case, tiny_cfg, no_data_work):
    overrides, message = CASES[case]
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=message):
        train(tiny_cfg(*overrides))
    assert time.perf_counter() - start < 5


def test_every_problem_is_listed_at_once(tiny_cfg, no_data_work):
    with pytest.raises(ConfigError) as err:
        train(tiny_cfg("decode.beam_size=0", "data.batch_size=0", "+atention.dim=5"))
    assert str(err.value).count("\n  - ") == 3


def test_real_extension_points_are_accepted(tiny_cfg):
    from omegaconf import OmegaConf

    cfg = tiny_cfg("+trainer.accumulate_grad_batches=2", "+optim.optimizer.betas=[0.9,0.99]",
                   "+logger.mine._target_=pytorch_lightning.loggers.CSVLogger")
    check_config(OmegaConf.to_container(cfg, resolve=True))


def test_pretrained_weights_absent(tiny_cfg, no_data_work, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    with pytest.raises(ConfigError, match="no ImageNet weights for resnet18.*encoder.weights_path"):
        train(tiny_cfg("encoder.pretrained=true"))


def test_an_encoder_file_other_than_the_pinned_one_is_refused(tiny_cfg, no_data_work, tmp_path):
    """encoder.weights_sha256 pins the one file a config's runs read (a grid on several machines):
    a file with other bytes (trained again) is refused before any work; the pinned file passes;
    the pin is no part of a run's key (the file's own fingerprint is)."""
    import hashlib

    from omegaconf import OmegaConf

    from captioning.provenance import config_hash

    weights = tmp_path / "encoder.pth"
    torch.save(torch.nn.Linear(2, 2).state_dict(), weights)
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    base = ("encoder.pretrained=true", f"encoder.weights_path={weights}", "encoder.verify_weights=false")
    with pytest.raises(ConfigError, match=rf"encoder.weights_path={weights}: its sha256 is {digest[:16]}"
                                          r"\.\.\., not encoder.weights_sha256=0{16}.*Copy that file here"):
        train(tiny_cfg(*base, "encoder.weights_sha256=" + "0" * 64))
    from captioning.models.encoder_weights import weights_problem

    pins = ([f"encoder.weights_sha256={digest}"], [f"encoder.weights_sha256={digest.upper()}"], [])
    plain = [OmegaConf.to_container(tiny_cfg(*base, *pin), resolve=True) for pin in pins]

    assert [weights_problem(p["encoder"]) for p in plain] == [None, None, None]
    assert len({config_hash(p) for p in plain}) == 1


def test_own_weights_absent_say_to_make_or_copy_them(tiny_cfg, no_data_work, tmp_path):
    """encoder.verify_weights=false names your own file: its absence is no torchvision download
    to fetch but a file to make or copy (the pinned one's sha256 named)."""
    with pytest.raises(ConfigError, match=r"encoder.weights_path=.*mine.pth: no such file. It is your own "
                                          r"weights file.*copy it here.*sha256 abababababababab\.\.\."):
        train(tiny_cfg("encoder.pretrained=true", f"encoder.weights_path={tmp_path / 'mine.pth'}",
                       "encoder.verify_weights=false", "encoder.weights_sha256=" + "ab" * 32))


def test_output_dir_not_writable(tiny_cfg, no_data_work, tmp_path):
    from omegaconf import open_dict

    (tmp_path / "a_file").write_text("")
    cfg = tiny_cfg()
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "a_file" / "run")
    with pytest.raises(ConfigError, match="paths.output_dir=.*a_file/run: not writable"):
        train(cfg)


def test_disk_too_small_shows_the_estimate(tiny_cfg, no_data_work, monkeypatch):
    from collections import namedtuple

    from captioning.lit import file_checks

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(file_checks.shutil, "disk_usage", lambda p: usage(10**9, 10**9, 2**20))
    with pytest.raises(ConfigError, match=r"1 MiB free, the run needs about \d+ MiB \(3 checkpoints"):
        train(tiny_cfg())


def test_a_resume_counts_the_room_of_the_checkpoints_it_replaces(tmp_path):
    """resume=<run> writes into that run: its last.ckpt and best.ckpt are replaced in place, so
    their room is the run's already (a run stopped by a full disk resumes once one checkpoint's
    room is free)."""
    from captioning.lit import file_checks

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("last.ckpt", "best.ckpt"):
        (run / "checkpoints" / name).write_bytes(b"x" * 1000)
    assert file_checks._resumed_run({"resume": str(run)}, tmp_path / "new") == (run, 2000)
    ckpt = str(run / "checkpoints" / "last.ckpt")
    assert file_checks._resumed_run({"resume": ckpt}, tmp_path / "new") == (run, 2000)
    assert file_checks._resumed_run({"resume": "auto"}, tmp_path / "new") == (tmp_path / "new", 0)
    assert file_checks._resumed_run({}, tmp_path / "new") == (tmp_path / "new", 0)


def test_resume_auto_without_an_earlier_run(tiny_cfg, no_data_work):
    with pytest.raises(ConfigError, match="resume=auto: no run under .* has this config's hash"):
        train(tiny_cfg("resume=auto"))


def test_a_bad_config_on_the_command_line_costs_seconds(tmp_path):
    """The whole command, Python start-up included: one clear message, a non-zero exit."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "train.py", "decode.beam_size=0", f"paths.log_dir={tmp_path}",
         f"paths.data_dir={tmp_path / 'data'}", "logger=none"],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    elapsed = time.perf_counter() - start
    assert proc.returncode == 2
    assert "decode.beam_size=0: must be an integer >= 1" in proc.stderr
    assert "Traceback" not in proc.stderr  # a user's mistake, not a crash
    assert not (tmp_path / "data").exists()  # nothing generated
    assert elapsed < 15, f"{elapsed:.1f} s"
