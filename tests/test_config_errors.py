"""Every shipped config composes and builds; bad settings fail with a message that helps."""

import json

import pytest
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException

from captioning.data.karpathy import load_karpathy
from captioning.models import build_captioner, build_encoder
from captioning.schema import Karpathy, ResNet, completed

GROUPS = ["data", "encoder", "attention", "decoder", "trainer", "logger"]


def _options(group):
    from conftest import config_options

    return config_options(group)


@pytest.mark.parametrize("group, option", [(g, o) for g in GROUPS for o in _options(g)])
def test_every_config_composes_and_builds(group, option, tmp_path):
    from conftest import compose_cfg

    cfg = compose_cfg([f"{group}={option}"], tmp_path, tmp_path)
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=False)
    assert plain[group] is not None or option == "none"
    if group in ("attention", "decoder", "encoder"):
        built = OmegaConf.to_container(cfg, resolve=True)
        if option == "precomputed":  # its width comes from the files (train() reads it first)
            with pytest.raises(ValueError, match="encoder.dim is not resolved"):
                build_captioner(built, vocab_size=11)
            built["encoder"]["dim"] = 64
        model = build_captioner(built, vocab_size=11)
        assert sum(p.numel() for p in model.parameters()) > 0
    if group == "trainer":
        import torch

        from captioning.lit.config_check import check_config
        from captioning.lit.training import build_trainer

        check_config(OmegaConf.to_container(cfg, resolve=True))  # every preset's keys are valid
        if cfg.trainer.accelerator == "gpu" and not torch.cuda.is_available():
            return  # composes and checks here; built on a GPU machine (maint/gpu_check.sh)
        trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
        if trainer_cfg["precision"] == "auto":  # train() measures it with the model; not here
            with pytest.raises(ValueError, match="must be resolved"):
                build_trainer(trainer_cfg, logger=False)
            trainer_cfg["precision"] = "32-true"
        trainer = build_trainer(trainer_cfg, logger=False)
        assert trainer.max_epochs == cfg.trainer.max_epochs
        assert torch.get_float32_matmul_precision() == cfg.trainer.matmul_precision
        torch.set_float32_matmul_precision("highest")
    if group == "logger":
        from omegaconf import OmegaConf

        from captioning.lit.loggers import build_loggers

        loggers = build_loggers(OmegaConf.to_container(cfg.logger, resolve=True))
        kinds = sorted(type(lg).__name__ for lg in loggers)
        csv = "ResumableCSVLogger"
        expected = {"none": [], "csv": [csv], "tensorboard": ["TensorBoardLogger"],
                    "wandb": ["WandbLogger"], "all": [csv, "TensorBoardLogger", "WandbLogger"]}
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
        build_encoder(completed({"name": "resnet18", "pretrained": True, "weights_path": None}, ResNet))


def test_a_dataset_whose_images_are_all_missing_fails_before_extraction(tmp_path):
    from captioning.data.prepare import dataset_features

    (tmp_path / "imgs").mkdir()
    images = [{"filename": f"{i}.jpg", "filepath": "imgs", "split": "train", "imgid": i,
               "sentences": [{"raw": "a dog"}]} for i in range(3)]
    (tmp_path / "d.json").write_text(json.dumps({"images": images}))
    cfg = completed({"name": "x", "json_path": str(tmp_path / "d.json"),
                     "cache_dir": str(tmp_path / "cache")}, Karpathy)
    with pytest.raises(FileNotFoundError, match="none of the 3 image files.*set data.image_root"):
        dataset_features(cfg, completed({"name": "resnet18", "image_size": 32}, ResNet))
    assert not list((tmp_path / "cache").glob("store_*"))  # nothing was extracted


def test_pretrained_weights_are_checked_against_torchvision_hashes(tmp_path, monkeypatch):
    """A weights file must be one torchvision publishes (its sha256 prefix is in the file name);
    a wrong file says how to fix it; verify_weights=false accepts your own weights."""
    import hashlib

    import torch
    import torchvision

    from captioning.models import encoder_weights as encoder_mod

    path = tmp_path / "r18.pth"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    cfg = completed({"name": "resnet18", "pretrained": True, "weights_path": str(path)}, ResNet)
    with pytest.raises(ValueError, match="matches none of torchvision's resnet18.*verify_weights=false"):
        build_encoder(cfg)
    own = build_encoder({**cfg, "verify_weights": False})
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert own.weights_id == f"sha256:{digest[:16]}"  # the content identifies the weights
    # The real table: every ResNet has its published files (ResNet-50: V1 and V2).
    assert set(encoder_mod.known_weights("resnet50").values()) == {
        "resnet50-0676ba61.pth", "resnet50-11ad3fa6.pth"}
    # The matching rule itself: a file whose hash prefix torchvision lists is accepted.
    monkeypatch.setattr(encoder_mod, "known_weights", lambda name: {digest[:8]: "resnet18-x.pth"})
    assert build_encoder(cfg).weights_id == own.weights_id


def test_learning_rate_scaling_with_the_process_count():
    from captioning.lit.optimizers import lr_scale

    assert lr_scale("none", 4) == 1.0 and lr_scale("sqrt", 4) == 2.0 and lr_scale("linear", 4) == 4.0
    assert lr_scale("sqrt", 1) == 1.0  # one process: the configured rate, whatever the rule


def test_the_karpathy_base_without_a_file_names_the_keys(tmp_path):
    """data=karpathy is the base the Karpathy presets extend; alone it needs its file."""
    from conftest import compose_cfg
    from omegaconf import OmegaConf

    from captioning.data.prepare import resolve_json
    from captioning.errors import UserError

    data = OmegaConf.to_container(compose_cfg(["data=karpathy"], tmp_path, tmp_path).data, resolve=True)
    with pytest.raises(UserError, match=r"data.json_path is not set for data=karpathy: data.json_path="):
        resolve_json(data)
    flickr = OmegaConf.to_container(compose_cfg(["data=flickr8k"], tmp_path, tmp_path).data)
    base = OmegaConf.to_container(compose_cfg(["data=karpathy"], tmp_path, tmp_path).data)
    # the preset is the base with its name and paths: no key of its own, no other value
    assert {k for k in flickr if flickr[k] != base[k]} == {"name", "json_path", "image_root"}
    assert flickr.keys() == base.keys()
