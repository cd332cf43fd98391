"""Nothing the user sets under `trainer.` or `callbacks.` is silently dropped: the Trainer
arguments the run sets itself are refused before any data work, with where the setting lives;
the callbacks group and trainer.plugins are honoured."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl

from captioning.lit import train
from captioning.lit.config_check import ConfigError


class Recorder(pl.Callback):
    """A user's callback (+callbacks.rec._target_=test_trainer_keys.Recorder)."""

    calls: list[str] = []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        Recorder.calls.append(f"epoch {trainer.current_epoch}")


@pytest.fixture
def data_spy(monkeypatch) -> list[str]:
    """Records every call of the data preparation train() would make."""
    from captioning.lit import datamodule

    called: list[str] = []
    monkeypatch.setattr(datamodule, "dataset_features", lambda *a, **k: called.append("load"))
    monkeypatch.setattr(datamodule, "prepare_data", lambda *a, **k: called.append("prepare"))
    return called


@pytest.mark.parametrize("override, says", [
    ("+trainer.callbacks=[{_target_: pytorch_lightning.callbacks.Timer}]", "callbacks=<name>"),
    ("+trainer.logger={_target_: pytorch_lightning.loggers.CSVLogger, save_dir: x}", "logger=wandb"),
    ("+trainer.use_distributed_sampler=true", "shards the training set by rank itself"),
    ("+trainer.plugins=[{_target_: lightning_fabric.plugins.io.torch_io.TorchCheckpointIO}]",
     "atomic"),
    ("+callbacks.bad._target_=builtins.dict", "callbacks.bad: needs a _target_ naming a pytorch_lightning"),
])
def test_overwritten_keys_are_refused_before_any_data_work(override, says, tiny_cfg, data_spy):
    with pytest.raises(ConfigError, match="nothing was started") as err:
        train(tiny_cfg(override))
    assert says in str(err.value)
    assert data_spy == []


def test_callbacks_from_the_config_are_called(tiny_cfg):
    Recorder.calls.clear()
    train(tiny_cfg("+callbacks.rec._target_=test_trainer_keys.Recorder", "trainer.max_epochs=2",
                   "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
                   "trainer.limit_test_batches=1"))
    assert Recorder.calls == ["epoch 0", "epoch 1"]


def test_a_callbacks_preset_and_a_null_entry(tiny_cfg):
    from captioning.lit.config_check import check_config
    from captioning.provenance import flatten

    cfg = tiny_cfg("callbacks=timer")
    assert flatten(dict(cfg.callbacks)) == {"timer._target_": "pytorch_lightning.callbacks.Timer",
                                            "timer.duration": "00:12:00:00", "timer.interval": "step"}
    from omegaconf import OmegaConf

    check_config(OmegaConf.to_container(tiny_cfg("callbacks=timer", "callbacks.timer=null"), resolve=True))


def test_trainer_plugins_are_honoured():
    """A cluster environment plugin (e.g. SLURM without auto-requeue) reaches the Trainer, beside
    the run's own atomic CheckpointIO."""
    from lightning_fabric.plugins.environments import LightningEnvironment

    from captioning.lit.checkpoint_policy import AtomicCheckpointIO
    from captioning.lit.training import build_trainer

    trainer = build_trainer({
        "_target_": "pytorch_lightning.Trainer", "accelerator": "cpu", "devices": 1, "logger": False,
        "enable_checkpointing": False, "enable_progress_bar": False, "use_distributed_sampler": False,
        "plugins": [{"_target_": "lightning_fabric.plugins.environments.LightningEnvironment"}]})
    assert isinstance(trainer._accelerator_connector.cluster_environment, LightningEnvironment)
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
