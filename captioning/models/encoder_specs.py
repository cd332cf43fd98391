"""Which image encoders exist and what follows from a name alone, before any network is built:
each one's feature width, grid stride, global token, input normalisation and fine-tuning
stages (ENCODERS), and the config-time checks that read them. The networks themselves:
models/encoder.py; their weights files: models/encoder_weights.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torchvision
from torch import nn

from . import clip_tower
from .registry import Registry

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class EncoderSpec:
    builder: Callable[..., nn.Module]  # torchvision constructor
    weights: type  # torchvision weights enum (its DEFAULT names the ImageNet file)
    dim: int  # channels of the last stage: the feature width
    family: str = "resnet"  # how its grid is read (_trunk)
    stride: int = 32  # input pixels per grid cell along a side
    blocks: int = 0  # ViT: its transformer blocks, the units fine-tuning counts
    global_token: bool = False  # its features start with a global vector (ViT's class token)
    mean: tuple[float, float, float] = IMAGENET_MEAN  # the input normalisation it was trained with
    std: tuple[float, float, float] = IMAGENET_STD


ENCODERS: Registry[EncoderSpec] = Registry("encoder")
for _name, _builder, _weights, _dim, _family, _stride in (
    ("resnet18", torchvision.models.resnet18, torchvision.models.ResNet18_Weights, 512, "resnet", 32),
    ("resnet34", torchvision.models.resnet34, torchvision.models.ResNet34_Weights, 512, "resnet", 32),
    ("resnet50", torchvision.models.resnet50, torchvision.models.ResNet50_Weights, 2048, "resnet", 32),
    ("resnet101", torchvision.models.resnet101, torchvision.models.ResNet101_Weights, 2048, "resnet", 32),
    ("resnet152", torchvision.models.resnet152, torchvision.models.ResNet152_Weights, 2048, "resnet", 32),
    ("convnext_tiny", torchvision.models.convnext_tiny, torchvision.models.ConvNeXt_Tiny_Weights, 768,
     "convnext", 32),
    ("swin_t", torchvision.models.swin_t, torchvision.models.Swin_T_Weights, 768, "swin", 32),
):
    ENCODERS.add(_name, EncoderSpec(_builder, _weights, _dim, _family, _stride))
ENCODERS.add("vit_b_16", EncoderSpec(torchvision.models.vit_b_16, torchvision.models.ViT_B_16_Weights, 768,
                                     "vit", 16, blocks=12, global_token=True))
for _name, _stride in (("clip_vit_b_32", 32), ("clip_vit_b_16", 16)):  # open-clip, an optional extra
    ENCODERS.add(_name, EncoderSpec(partial(clip_tower.build_tower, _name), None, 768, "clip", _stride,
                                    mean=clip_tower.CLIP_MEAN, std=clip_tower.CLIP_STD))


def stage_starts(spec: EncoderSpec) -> dict[str, int]:
    """Fine-tuning's units, first to last: each stage's name and the index of the trunk
    (models/encoder.py: _trunk) it starts at (what follows the last stage, Swin's norm or
    ViT's, trains with it)."""
    if spec.family == "resnet":  # conv1, bn1, relu, maxpool, layer1..4
        return {"stem": 0, "layer1": 4, "layer2": 5, "layer3": 6, "layer4": 7}
    if spec.family in ("convnext", "swin"):  # stem, then each stage after its downsampling
        return {"stem": 0, "stage1": 1, "stage2": 2, "stage3": 4, "stage4": 6}
    if spec.family == "clip":  # used frozen
        return {}
    return {"embed": 0, **{f"block{i}": i for i in range(1, spec.blocks + 1)}}  # ViT


def encoder_dim(name: str) -> int:
    """Channels of the encoder's last stage (the feature width)."""
    return ENCODERS[name].dim


def grid_cells(image_size: int, name: str = "resnet50") -> int:
    """Feature cells of encoder `name` at `image_size` px: a ResNet's five stride-2 stages each
    round up when halving (ceil(size / 32) per side): 128 px -> 16 (4x4), 224 -> 49 (7x7); the
    others take sizes that are a multiple of their stride (size_problem)."""
    return math.ceil(image_size / ENCODERS[name].stride) ** 2


def global_first(enc_cfg: dict) -> bool:
    """Whether a run's raw features start with a global vector ahead of the keys (ViT's class
    token; encoder=precomputed: `encoder.global_first`): the decoders then start from it instead
    of the keys' mean and attend over the rest."""
    if enc_cfg["name"] == "precomputed":
        return bool(enc_cfg.get("global_first"))
    return ENCODERS[enc_cfg["name"]].global_token


def feature_rows(image_size: int, name: str) -> int:
    """Feature rows per image of encoder `name` at `image_size`: its grid cells, plus the global
    vector of an encoder that has one (ViT-B/16 at 224 px: 1 + 196)."""
    return grid_cells(image_size, name) + ENCODERS[name].global_token


def size_problem(name: str, image_size: int) -> str | None:
    """Why `image_size` does not suit encoder `name`, or None."""
    spec = ENCODERS[name]
    if spec.family != "resnet" and image_size % spec.stride:
        return f"{name} reads images in {spec.stride}-pixel steps: use a multiple of {spec.stride}"
    return None


def tuning_stages(name: str) -> tuple[str, ...]:
    """The stages `encoder.finetune_stages` counts from the end, for encoder `name`: a ResNet's
    stem and layer1..4, ConvNeXt's and Swin's stem and stage1..4, ViT's embedding and blocks."""
    return tuple(stage_starts(ENCODERS[name]))


def dependency_problem(name: str) -> str | None:
    """Why encoder `name` cannot be built in this environment (an optional extra missing), or None."""
    if ENCODERS[name].family == "clip":
        try:
            clip_tower.open_clip_module()
        except ImportError as err:
            return f"encoder={name}: {err}"
    return None


def finetune_problem(name: str, stages: int) -> str | None:
    """Why encoder.finetune=true with `stages` does not suit encoder `name`, or None."""
    names = tuning_stages(name)
    if not names:
        return (f"encoder.finetune=true: {name} is used frozen here (its features extracted once: "
                "encoder.finetune=false)")
    if not 1 <= stages <= len(names):
        return (f"encoder.finetune_stages={stages}: {name} has {len(names)} stages ({names[0]} .. "
                f"{names[-1]}); 1 = {names[-1]}, {len(names)} = all")
    return None


def feature_dim(enc_cfg: dict) -> int:
    """The width of the raw features a run's `encoder` config gives: its ResNet's, or for
    encoder=precomputed `encoder.dim`, which training reads from the feature files."""
    if enc_cfg["name"] != "precomputed":
        return encoder_dim(enc_cfg["name"])
    if not isinstance(enc_cfg.get("dim"), int):
        raise ValueError("encoder=precomputed: encoder.dim is not resolved yet (training reads it "
                         "from the files in encoder.path: data.precomputed.feature_width)")
    return enc_cfg["dim"]
