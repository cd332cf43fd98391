"""Encoders beyond ResNet (torchvision's ConvNeXt-T, Swin-T, ViT-B/16, and open-clip's CLIP ViT-B/32
and B/16 towers; random init here, their weights enums or files as for ResNets): each gives a grid
of 768-d features at the size it is configured for, the same grid for the same seed, and every
attention mode with both decoders trains on it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TINY_DECODERS, compose_cfg, config_options

from captioning.models.captioner import build_captioner
from captioning.models.decoders import build_decoder
from captioning.models.encoder import build_encoder
from captioning.models.encoder_specs import ENCODERS, feature_rows, grid_cells

NEW = ["convnext_tiny", "swin_t", "vit_b_16", "clip_vit_b_32", "clip_vit_b_16"]
MODES = config_options("attention")
_features: dict[str, torch.Tensor] = {}


def _grid(name: str) -> torch.Tensor:
    """Features of 2 random 64-px images, made once per encoder."""
    if name not in _features:
        cfg = compose_cfg([f"encoder={name}", "encoder.image_size=64"], Path("/tmp"), Path("/tmp"))
        encoder = build_encoder(dict(cfg.encoder)).eval()
        with torch.no_grad():
            _features[name] = encoder(torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)))
    return _features[name]


@pytest.mark.parametrize("name", NEW)
def test_each_encoder_gives_its_grid_of_768_d_features_the_same_for_its_seed(name):
    feats = _grid(name)
    assert feats.shape == (2, feature_rows(64, name), ENCODERS[name].dim) and ENCODERS[name].dim == 768
    assert feature_rows(64, name) == grid_cells(64, name) + (name == "vit_b_16")  # ViT: + its class token
    assert torch.isfinite(feats).all() and feats.std() > 0
    assert feats[0].sub(feats[1]).abs().max() > 0  # two images, two grids
    again = build_encoder({"name": name, "pretrained": False, "weights_path": None, "init_seed": 0,
                           "verify_weights": True, "image_size": 64}).eval()
    with torch.no_grad():
        assert torch.equal(again(torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))), feats)


def test_vit_is_built_for_the_size_it_reads_and_refuses_a_size_off_its_patches():
    assert grid_cells(224, "vit_b_16") == 196 and grid_cells(224, "swin_t") == 49
    with pytest.raises(ValueError, match="multiple of 16"):
        build_encoder({"name": "vit_b_16", "pretrained": False, "weights_path": None, "init_seed": 0,
                       "verify_weights": True, "image_size": 72})


def test_vits_first_row_is_its_class_token_and_the_lstm_starts_from_it():
    """The rows are the network's own last layer (torchvision's forward up to its norm), the
    class token first; the LSTM's initial state reads that row only, attention the patches only."""
    feats = _grid("vit_b_16")  # (2, 1 + 16, 768)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = ENCODERS["vit_b_16"].builder(weights=None, image_size=64).eval()
    images = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    mean, std = torch.tensor(ENCODERS["vit_b_16"].mean), torch.tensor(ENCODERS["vit_b_16"].std)
    x = net._process_input((images - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1))  # (2, 16, 768)
    with torch.no_grad():
        tokens = net.encoder(torch.cat([net.class_token.expand(2, -1, -1), x], 1))  # (2, 17, 768)
    torch.testing.assert_close(feats, tokens, rtol=1e-4, atol=1e-4)
    dec = build_decoder({"name": "lstm", **TINY_DECODERS["lstm"]}, 20, 768, {"name": "additive"},
                        global_first=True).eval()
    h0 = lambda f: dec.init_state(dec.prepare(f), f).h  # noqa: E731
    patches_moved, token_moved = feats.clone(), feats.clone()
    patches_moved[:, 1:] += 1.0
    token_moved[:, 0] += 1.0
    assert torch.equal(h0(patches_moved), h0(feats)) and not torch.equal(h0(token_moved), h0(feats))
    assert dec.prepare(feats).keys.shape[1] == 16


def _train_step(name: str, decoder: str, mode: str) -> None:
    feats = _grid(name)
    tiny = [f"decoder.{k}={v}" for k, v in TINY_DECODERS[decoder].items()]
    cfg = compose_cfg([f"encoder={name}", "encoder.image_size=64", f"decoder={decoder}", f"attention={mode}",
                       *tiny], Path("/tmp"), Path("/tmp"))
    model = build_captioner(cfg, 20)
    tokens = torch.randint(4, 20, (2, 6))
    logits, weights = model(feats, tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 20), tokens[:, 1:].reshape(-1))
    loss.backward()
    assert torch.isfinite(loss) and weights.shape[-1] == grid_cells(64, name)  # keys only, no class token
    assert all(p.grad is not None for p in model.decoder.attention.parameters() if p.requires_grad)


@pytest.mark.parametrize("decoder", sorted(TINY_DECODERS))
@pytest.mark.parametrize("name", NEW)
def test_additive_and_dot_train_on_the_encoders_features(name, decoder):
    for mode in ("additive", "dot"):
        _train_step(name, decoder, mode)


@pytest.mark.slow
@pytest.mark.parametrize("decoder", sorted(TINY_DECODERS))
@pytest.mark.parametrize("name", NEW)
def test_every_attention_mode_trains_on_the_encoders_features(name, decoder):
    for mode in MODES:
        _train_step(name, decoder, mode)


def _clip_file(tmp_path: Path, suffix: str) -> tuple[Path, torch.nn.Module]:
    """An open-clip CLIP checkpoint as open-clip writes one (the whole model's state dict, text
    tower included), of a ViT-B/32 drawn at another seed: (file, its image tower)."""
    import open_clip

    torch.manual_seed(7)
    model = open_clip.create_model("ViT-B-32", pretrained=None)
    path = tmp_path / f"open_clip_pytorch_model{suffix}"
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    else:
        torch.save(model.state_dict(), path)
    return path, model.visual


@pytest.mark.parametrize("suffix", [".bin", ".safetensors"])
def test_a_clip_weights_file_is_read_safely_and_resized_to_the_runs_image_size(tmp_path, suffix):
    from captioning.models.clip_tower import CLIP_MEAN, CLIP_STD

    path, tower = _clip_file(tmp_path, suffix)
    settings = {"name": "clip_vit_b_32", "pretrained": True, "weights_path": str(path), "init_seed": 0,
                "verify_weights": True}
    at_224 = build_encoder({**settings, "image_size": 224}).eval()
    images = torch.rand(1, 3, 224, 224)
    tower.output_tokens = True
    with torch.no_grad():  # CLIP's own normalisation, then the file's tower
        mean, std = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1), torch.tensor(CLIP_STD).view(1, 3, 1, 1)
        want = tower.eval()((images - mean) / std)[1]  # (1, 49, 768)
        assert torch.allclose(at_224(images), want, atol=1e-5)
    assert at_224.weights_id.startswith("sha256:")
    at_64 = build_encoder({**settings, "image_size": 64}).eval()  # a 2x2 grid: embeddings resized
    with torch.no_grad():
        assert at_64(torch.rand(1, 3, 64, 64)).shape == (1, 4, 768)


def test_clip_without_its_file_or_its_package_is_refused_before_any_work(tmp_path, monkeypatch):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "data").mkdir()
    done = subprocess.run([sys.executable, "train.py", "encoder=clip_vit_b_32", "encoder.pretrained=true",
                           f"paths.data_dir={tmp_path / 'data'}", f"hydra.run.dir={tmp_path / 'run'}",
                           "logger=none"], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "encoder.weights_path" in done.stderr and "Traceback" not in done.stderr
    assert not any((tmp_path / "data").iterdir())  # nothing was started
    from captioning.models.encoder_specs import dependency_problem

    monkeypatch.setitem(sys.modules, "open_clip", None)  # as if the extra were not installed
    assert 'pip install -e ".[clip]"' in dependency_problem("clip_vit_b_16")
    assert dependency_problem("vit_b_16") is None
