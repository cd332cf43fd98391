"""Shared fixtures: compose real configs from conf/, shrunk to a tiny model and dataset."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from captioning.schema import register

register()  # every test that composes conf/ needs the schemas its yamls name

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")

# Keep every cache inside tmp dirs (never the user's home) and wandb offline.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("MPLCONFIGDIR", "/tmp/captioning-test-mpl")
# The CPU precision calibration (captioning/models/precision_choice.py): measured once, cached here.
os.environ.setdefault("CAPTIONING_CACHE_DIR", "/tmp/captioning-test-cache")
# Training precision: the suite trains in fp32 on every machine (trainer.precision=auto would
# measure each tiny model and could pick bf16 on one CPU and fp32 on another); auto has its own
# tests (test_precision.py).
os.environ.setdefault("CAPTIONING_TRAIN_PRECISION", "32-true")
# `make test` runs one pytest worker per core (pytest-xdist, -n auto): each worker and the
# processes it starts compute on one thread, so two workers do not share a core's threads (the
# suite is mostly small models, where a second thread gains little and contention costs much).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

TINY = [
    "encoder=resnet18",
    "encoder.image_size=64",
    "encoder.batch_size=32",
    "encoder.num_workers=0",
    "data.synthetic.num_train=96",
    "data.synthetic.num_val=12",
    "data.synthetic.num_test=24",
    "data.synthetic.image_size=64",
    "data.batch_size=4",
    "data.eval_batch_size=16",
    "optim.optimizer.lr=5e-3",
    "trainer.max_epochs=3",
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=1",
    "logger=none",
]


def config_options(group: str) -> list[str]:
    """A config group's options as `--help` lists them: its yamls under conf/, and for the
    groups whose options are a registry's names (attention, decoder), those."""
    from captioning.schema import DERIVED_GROUPS

    yamls = {p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml")}
    return sorted(yamls | set(DERIVED_GROUPS.get(group, {})))


def compose_cfg(overrides: list[str], out_dir: Path, data_dir: Path) -> DictConfig:
    """Compose conf/train.yaml with overrides; outputs and data go to the given dirs."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.output_dir = str(out_dir)
        cfg.paths.data_dir = str(data_dir)
    return cfg


TINY_DECODERS = {
    "lstm": {"embed_dim": 64, "hidden_dim": 64, "value_dim": 32},
    "transformer": {"d_model": 64, "num_layers": 1, "num_heads": 4, "ff_dim": 128},
}


def shrink(cfg: DictConfig) -> DictConfig:
    """Tiny widths for whichever decoder and attention the config picked."""
    with open_dict(cfg):
        cfg.decoder.update(TINY_DECODERS[cfg.decoder.name])
        if "attn_dim" in cfg.attention:  # only some attention modes have one
            cfg.attention.attn_dim = 32
    return cfg


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """One data dir for the whole test run: the tiny dataset and its features are made once."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture
def tiny_cfg(tmp_path, data_dir):
    """A factory: tiny_cfg('attention=dot', ...) -> composed, shrunk config."""

    def make(*overrides: str) -> DictConfig:
        return shrink(compose_cfg(TINY + list(overrides), tmp_path / "run", data_dir))

    return make


def untrained_bleu1(run_dir: Path) -> float:
    """Test BLEU-1 of a run's model at initialisation: the same config, vocabulary, fitted
    normaliser, features and decoding as the run's test stage, untrained weights. The control a
    trained run is judged against ("it learned something") on every CPU, instead of a number
    measured on one."""
    import torch

    from captioning import load_checkpoint
    from captioning.data.prepare import usable_data
    from captioning.metrics.bleu import corpus_bleu_scores
    from captioning.models import build_captioner

    model, vocab, cfg = load_checkpoint(Path(run_dir) / "checkpoints" / "best.ckpt")
    torch.manual_seed(cfg["seed"])
    start = build_captioner(cfg, len(vocab)).eval()
    start.normalizer.load_state_dict(model.normalizer.state_dict())
    data = usable_data(cfg["data"], cfg["encoder"])
    test = data.split_indices("test")
    ids, _ = start.generate(data.raw_features(test), vocab.bos, vocab.eos, vocab.pad, **cfg["decode"])
    refs = [data.records[i].captions for i in test]
    return corpus_bleu_scores([vocab.decode(t) for t in ids], refs)["bleu1"]
