"""Every shipped config composes and builds; bad settings fail with a message that helps."""

from pathlib import Path

import pytest
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException

from captioning.data.karpathy import load_karpathy
from captioning.models import build_captioner, build_encoder

GROUPS = ["data", "encoder", "attention", "decoder", "trainer", "logger"]


def _options(group):
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


@pytest.mark.parametrize("group, option", [(g, o) for g in GROUPS for o in _options(g)])
def test_every_config_composes_and_builds(group, option, tmp_path):
    from conftest import compose_cfg

    cfg = compose_cfg([f"{group}={option}"], tmp_path, tmp_path)
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=False)
    assert plain[group] is not None or option == "none"
    if group in ("attention", "decoder", "encoder"):
        model = build_captioner(OmegaConf.to_container(cfg, resolve=True), vocab_size=11)
        assert sum(p.numel() for p in model.parameters()) > 0
    if group == "trainer":
        import hydra

        trainer = hydra.utils.instantiate(cfg.trainer, logger=False)
        assert trainer.max_epochs == cfg.trainer.max_epochs
    if group == "logger":
        from omegaconf import OmegaConf

        from captioning.lit.loggers import build_loggers

        loggers = build_loggers(OmegaConf.to_container(cfg.logger, resolve=True))
        kinds = sorted(type(lg).__name__ for lg in loggers)
        expected = {"none": [], "csv": ["CSVLogger"], "tensorboard": ["TensorBoardLogger"],
                    "wandb": ["WandbLogger"], "all": ["CSVLogger", "TensorBoardLogger", "WandbLogger"]}
        assert kinds == expected[option]
        for lg in loggers:
            if type(lg).__name__ == "WandbLogger":
                lg.experiment.finish()


@pytest.mark.parametrize("group", ["attention", "decoder", "encoder", "data"])
def test_unknown_group_option_lists_valid_ones(group):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        with pytest.raises(ConfigCompositionException) as err:
            compose("train", overrides=[f"{group}=nonsense"])
    GlobalHydra.instance().clear()
    msg = str(err.value)
    assert "nonsense" in msg
    for option in _options(group):
        assert option in msg


def test_missing_dataset_json_and_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset JSON not found.*data.json_path"):
        load_karpathy(tmp_path / "dataset_flickr8k.json")
    (tmp_path / "d.json").write_text('{"images": []}')
    with pytest.raises(FileNotFoundError, match="image directory not found.*data.image_root"):
        load_karpathy(tmp_path / "d.json", tmp_path / "nope")
    (tmp_path / "bad.json").write_text('{"nothing": 1}')
    with pytest.raises(ValueError, match="not a Karpathy-split JSON"):
        load_karpathy(tmp_path / "bad.json")


def test_pretrained_without_weights_says_how_to_fix(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    with pytest.raises(FileNotFoundError, match="encoder.weights_path.*pretrained=false"):
        build_encoder({"name": "resnet18", "pretrained": True, "weights_path": None})


def test_pretrained_from_local_weights_path(tmp_path):
    import torch
    import torchvision

    path = tmp_path / "r18.pth"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    enc = build_encoder({"name": "resnet18", "pretrained": True, "weights_path": str(path)})
    assert str(path) in enc.weights_id
