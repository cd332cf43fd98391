"""torchvision image encoders: images (B, 3, H, W) -> grid features (B, N, C). ResNets and
ConvNeXt-T: the last stage's grid (N = (H/32)*(W/32)); Swin-T: its last stage's windows, after its
norm; ViT-B/16: its last layer's class token, then its patch tokens (1 + N, N = (H/16)*(W/16)): the
class token is the global vector (global_first: the decoders start from it and attend over the
patches); open-clip's CLIP ViT towers give their patch tokens (models/clip_tower.py, an optional
extra). Fine-tuning (TunableEncoder) trains the last stages of
any torchvision one (_stage_starts)."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torchvision
from torch import nn

from . import clip_tower
from .attention.position import grid_side
from .precision_choice import calibrated_dtype
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


class _ViTTokens(nn.Module):
    """A torchvision VisionTransformer's input: patches embedded, the class token first, the
    position embeddings added (B, 3, H, W) -> (B, 1 + N, D). Its modules are the network's own."""

    def __init__(self, vit: nn.Module) -> None:
        super().__init__()
        self.conv_proj, self.class_token = vit.conv_proj, vit.class_token
        self.pos_embedding, self.dropout = vit.encoder.pos_embedding, vit.encoder.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.conv_proj(x).flatten(2).transpose(1, 2)  # (B, N, D), patches row-major
        cls = self.class_token.expand(len(tokens), -1, -1)  # (B, 1, D)
        return self.dropout(torch.cat([cls, tokens], 1) + self.pos_embedding)  # (B, 1 + N, D)


class _ViTOutput(nn.Module):
    """The last layer's norm over every token: (B, 1 + N, D), the class token first, then the
    patches of a square grid, row-major (checked: images are square, encoder.image_size)."""

    def __init__(self, ln: nn.Module) -> None:
        super().__init__()
        self.ln = ln

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid_side(x.shape[1] - 1, "ViT's patch tokens")
        return self.ln(x)  # (B, 1 + N, D)


def _trunk(family: str, net: nn.Module) -> nn.Sequential:
    """The network without its classifier: images (B, 3, H, W) -> its grid (B, C, h, w) (ViT: its
    tokens (B, 1 + N, C)), as a Sequential whose children are the units fine-tuning splits at
    (_stage_starts)."""
    if family == "resnet":
        return nn.Sequential(*list(net.children())[:-2])  # drop avgpool and fc
    if family == "convnext":
        return net.features
    if family == "swin":
        return nn.Sequential(*net.features, net.norm, net.permute)  # (B, h, w, C) -> (B, C, h, w)
    if family == "clip":
        return nn.Sequential(clip_tower.ClipTokens(net))
    return nn.Sequential(_ViTTokens(net), *net.encoder.layers, _ViTOutput(net.encoder.ln))


def _stage_starts(spec: EncoderSpec) -> dict[str, int]:
    """Fine-tuning's units, first to last: each stage's name and the index of the trunk (_trunk)
    it starts at (what follows the last stage, Swin's norm or ViT's, trains with it)."""
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
    return tuple(_stage_starts(ENCODERS[name]))


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


def file_sha256(path: str | Path) -> str:
    """The hex sha256 of a file: how a weights file is named in checks and in run records."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_problem(enc_cfg: dict, absent_ok: bool = False) -> str | None:
    """What is wrong with a pretrained encoder's weights file, before any work -> a message, or
    None. Absent: where to put it (torchvision's file; or your own, encoder.verify_weights=false:
    make it or copy it). Present with other bytes than encoder.weights_sha256, the one file a
    config's runs read (a grid worked on several machines): a file trained again is another
    encoder, and its runs would be other cells. `absent_ok`: a missing file is no problem (a
    grid's status on a machine without the file)."""
    name, path, want = enc_cfg.get("name"), enc_cfg.get("weights_path"), enc_cfg.get("weights_sha256")
    if not enc_cfg.get("pretrained") or name not in ENCODERS:
        return None
    own = not enc_cfg.get("verify_weights", True) and ENCODERS[name].family != "clip"
    if path and own and not Path(path).expanduser().is_file():
        if absent_ok:
            return None
        return (f"encoder.weights_path={path}: no such file. It is your own weights file "
                "(encoder.verify_weights=false), not one torchvision publishes: make it (e.g. "
                "scripts/pretrain_encoder.py) or copy it here from a machine that has it"
                + (f" (the one with sha256 {want[:16]}..., encoder.weights_sha256)" if want else "") + ".")
    try:
        found = find_weights(name, path)
    except FileNotFoundError as err:
        return None if absent_ok else str(err)
    if not want or (have := file_sha256(found)) == want.lower():
        return None
    return (f"encoder.weights_path={found}: its sha256 is {have[:16]}..., not encoder.weights_sha256="
            f"{want[:16]}..., the file this config's runs read. Copy that file here from a machine "
            "that has it (a file trained again is another encoder: its runs would be other cells "
            "than the ones recorded), or set encoder.weights_sha256=null to use this file.")


def known_weights(name: str) -> dict[str, str]:
    """{sha256 prefix: file name} of every ImageNet file torchvision publishes for `name` (the
    prefix is in the file name, as torch.hub checks it)."""
    out = {}
    for member in ENCODERS[name].weights:
        file = os.path.basename(member.url)
        if match := torch.hub.HASH_REGEX.search(file):
            out[match.group(1)] = file
    return out


def find_weights(name: str, weights_path: str | None) -> Path:
    """The ImageNet weights file for `name`: `weights_path`, else torchvision's file names in the
    local torch hub cache (a CLIP tower: `weights_path` only). Never downloads;
    FileNotFoundError says where to put the file."""
    if ENCODERS[name].family == "clip":
        return clip_weights(name, weights_path)
    default = os.path.basename(ENCODERS[name].weights.DEFAULT.url)
    hub = Path(torch.hub.get_dir()) / "checkpoints"
    candidates = [Path(weights_path).expanduser()] if weights_path else []
    candidates += [hub / file for file in dict.fromkeys([default, *known_weights(name).values()])]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"encoder.pretrained=true but no ImageNet weights for {name} were found (looked in: "
        f"{', '.join(str(p) for p in candidates)}). Downloads are disabled: copy {default} (from "
        f"{ENCODERS[name].weights.DEFAULT.url}) into {hub}, or set "
        f"encoder.weights_path=/path/to/file.pth, or use encoder.pretrained=false."
    )


def clip_weights(name: str, weights_path: str | None) -> Path:
    """A CLIP tower's weights: open-clip's file at `weights_path` (there is no cache to look in
    and nothing is downloaded). FileNotFoundError says what to fetch."""
    if weights_path and Path(weights_path).expanduser().is_file():
        return Path(weights_path).expanduser()
    raise FileNotFoundError(
        f"encoder.pretrained=true: {name} reads open-clip's weights file from encoder.weights_path "
        f"({weights_path or 'unset'}: no such file). Downloads are disabled: fetch the "
        f"{clip_tower.MODELS[name]} file you want (e.g. open_clip_pytorch_model.bin from its "
        "Hugging Face repository) on a machine with internet, then set encoder.weights_path=<it>; "
        "or use encoder.pretrained=false.")


def _load_pretrained(name: str, weights_path: str | None, verify: bool = True) -> tuple[dict, str]:
    """ImageNet weights from find_weights, checked against torchvision's published hashes ->
    (state dict, weights id = content hash)."""
    path = find_weights(name, weights_path)
    known = known_weights(name)
    digest = file_sha256(path)
    if verify and not any(digest.startswith(prefix) for prefix in known):
        raise ValueError(
            f"{path}: its sha256 ({digest[:8]}...) matches none of torchvision's {name} "
            f"ImageNet files ({', '.join(known.values())}): a wrong or damaged copy. Copy "
            f"{os.path.basename(ENCODERS[name].weights.DEFAULT.url)} again, or, if these are "
            "your own weights on purpose, set encoder.verify_weights=false."
        )
    # The content, not the path, identifies the weights: moving the file keeps the cache.
    return torch.load(path, map_location="cpu", weights_only=True), f"sha256:{digest[:16]}"


class ResNetEncoder(nn.Module):
    """A torchvision encoder without pooling/classifier, returning its last grid flattened (the
    name is the first family's: every ENCODERS entry builds here)."""

    def __init__(
        self,
        name: str,
        *,
        pretrained: bool,
        weights_path: str | None,
        init_seed: int,
        verify_weights: bool,
        image_size: int,
    ) -> None:
        super().__init__()
        spec = ENCODERS[name]
        builder, self.out_dim = spec.builder, spec.dim
        if problem := size_problem(name, image_size):
            raise ValueError(f"encoder.image_size={image_size}: {problem}")
        # ViT's position embeddings are made for one input size: it is built at the run's size
        kwargs = {"image_size": image_size} if spec.family in ("vit", "clip") else {}
        # A random encoder is a fixed function of its seed (and torch's init code), so features
        # cached from it and images captioned later see the same network.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            net = builder(weights=None, **kwargs)
        # what a random network depends on besides its seed: its init code (a CLIP tower's is open_clip's too)
        code = clip_tower.random_init_id() if spec.family == "clip" else f"torch{torch.__version__}"
        self.weights_id = f"random-seed{init_seed}-{code}"
        if pretrained and spec.family == "clip":
            path = clip_weights(name, weights_path)
            clip_tower.load_tower_weights(net, path)
            self.weights_id = f"sha256:{file_sha256(path)[:16]}"
        elif pretrained:
            state, self.weights_id = _load_pretrained(name, weights_path, verify_weights)
            if spec.family == "vit" and image_size != 224:  # the file's embeddings are for 224 px
                from torchvision.models.vision_transformer import interpolate_embeddings

                state = interpolate_embeddings(image_size, net.patch_size, state)
            net.load_state_dict(state)
        self.family, self.image_size = spec.family, image_size
        self.trunk = _trunk(spec.family, net)  # attention needs the spatial grid
        self.register_buffer("mean", torch.tensor(spec.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(spec.std).view(1, 3, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W) in [0, 1] -> features (B, N, C) (ViT: 1 + N, its class token first)."""
        x = (images - self.mean) / self.std
        return _rows(self.trunk(x.contiguous(memory_format=torch.channels_last)))

    def train(self, mode: bool = True) -> ResNetEncoder:
        """BatchNorm always uses its stored statistics, also while stages fine-tune: batches of
        a few dozen images give noisy statistics, and new ones would shift every feature the
        normaliser was fitted on (and, for ImageNet weights, replace the best estimate there is)."""
        super().train(mode)
        for m in self.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()
        return self


def _rows(x: torch.Tensor) -> torch.Tensor:
    """A trunk's output as feature rows (B, N, C): a grid (B, C, h, w) flattened row-major;
    tokens (B, 1 + N, C) (ViT) as they are."""
    return x if x.dim() == 3 else x.flatten(2).transpose(1, 2)


def torchvision_state(encoder: ResNetEncoder, name: str) -> dict[str, torch.Tensor]:
    """The encoder's weights as torchvision's `name` state dict (the trunk under torchvision's
    names, the unused classifier from a fresh network), loadable with encoder.pretrained=true
    encoder.weights_path=<file> encoder.verify_weights=false: a trained encoder then runs, frozen
    and cached, exactly like any other weights file. (ViT: its position embeddings are for the
    size it ran at, interpolated on loading at another.)"""
    spec = ENCODERS[name]
    net = spec.builder(weights=None, **({"image_size": encoder.image_size} if spec.family == "vit" else {}))
    # The trunk is built from the network's own modules: loading into it fills the network.
    trained = {k: v.detach().clone() for k, v in encoder.trunk.state_dict().items()}
    _trunk(spec.family, net).load_state_dict(trained)
    return net.state_dict()


class TunableEncoder(ResNetEncoder):
    """A ResNetEncoder whose last `stages` stages train (encoder.finetune): the frozen part runs
    without gradients in the precision feature extraction uses on that device (autocast_dtype),
    the trained part in float32. Its state dict holds the trained
    stages and the frozen part's weights id only; loading fills the frozen part from this
    (rebuilt) network after checking that id."""

    def __init__(self, stages: int, precision: str, **kwargs) -> None:
        if problem := finetune_problem(kwargs["name"], stages):  # before building it
            raise ValueError(problem)
        super().__init__(**kwargs)
        autocast_dtype(torch.device("cpu"), precision)  # an unknown name fails here, not mid-epoch
        self.precision = precision
        self.stages = stages
        starts = list(_stage_starts(ENCODERS[kwargs["name"]]).values())
        self.split = starts[-stages]  # trunk[:split] frozen, trunk[split:] trained
        for i, module in enumerate(self.trunk):
            module.requires_grad_(i >= self.split)
        self.register_state_dict_post_hook(_drop_frozen)
        self.register_load_state_dict_pre_hook(_fill_frozen)
        # BatchNorm in eval mode from the start: Lightning records every module's mode before
        # validation and writes it back afterwards (bypassing train()), so a mode recorded as
        # "training" here would come back and update the statistics.
        self.train(self.training)

    def train(self, mode: bool = True) -> TunableEncoder:
        """The frozen units stay in eval mode whole (BatchNorm everywhere, as in every encoder):
        ConvNeXt's and Swin's stochastic depth would otherwise drop their blocks at random under
        features that are meant to be fixed."""
        super().train(mode)
        for unit in list(self.trunk)[: self.split]:
            unit.eval()
        return self

    def frozen_prefixes(self, prefix: str = "") -> tuple[str, ...]:
        return tuple(f"{prefix}trunk.{i}." for i in range(self.split))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W) uint8 or [0, 1] float -> features (B, N, C) float32 (as forward's)."""
        if images.dtype == torch.uint8:
            images = images.float().div_(255)
        x = ((images - self.mean) / self.std).contiguous(memory_format=torch.channels_last)
        dtype = autocast_dtype(x.device, self.precision)
        with torch.no_grad(), torch.autocast(x.device.type, dtype=dtype, enabled=dtype != torch.float32):
            x = self.trunk[: self.split](x)  # (B, C', h', w')
        return _rows(self.trunk[self.split :](x.float()))  # float32 with gradients

    def get_extra_state(self) -> dict:
        return {"weights_id": self.weights_id, "stages": self.stages}

    def set_extra_state(self, state: dict) -> None:
        if state.get("weights_id") != self.weights_id:
            raise ValueError(
                f"the fine-tuned encoder stages were trained on top of frozen weights "
                f"'{state.get('weights_id')}', but this machine builds '{self.weights_id}' (a random "
                "init differs between torch versions; ImageNet weights by file): load it where the "
                "same encoder weights exist (same torch version, or the same encoder.weights_path).")


def _drop_frozen(module: TunableEncoder, state: dict, prefix: str, local_metadata) -> None:
    """state_dict hook: the frozen stages are rebuilt from the config, not stored."""
    for key in [k for k in state if k.startswith(module.frozen_prefixes(prefix))]:
        del state[key]


def _fill_frozen(module: TunableEncoder, state: dict, prefix: str, *args) -> None:
    """load_state_dict pre-hook: the frozen stages come from the network as built."""
    frozen = module.frozen_prefixes(prefix)
    for name, tensor in [*module.trunk.named_parameters(prefix=f"{prefix}trunk"),
                         *module.trunk.named_buffers(prefix=f"{prefix}trunk")]:
        if name.startswith(frozen) and name not in state:
            state[name] = tensor.detach()


def build_encoder(enc_cfg: dict) -> ResNetEncoder:
    """The frozen feature extractor described by the `encoder` config group."""
    return ResNetEncoder(
        enc_cfg["name"], pretrained=enc_cfg["pretrained"], weights_path=enc_cfg["weights_path"],
        init_seed=enc_cfg["init_seed"], verify_weights=enc_cfg["verify_weights"],
        image_size=enc_cfg["image_size"],
    )


def build_tunable_encoder(enc_cfg: dict) -> TunableEncoder:
    """The encoder of `encoder.finetune=true`: the configured network, its last
    `encoder.finetune_stages` stages trainable."""
    return TunableEncoder(
        enc_cfg["finetune_stages"], enc_cfg["precision"], name=enc_cfg["name"],
        pretrained=enc_cfg["pretrained"], weights_path=enc_cfg["weights_path"],
        init_seed=enc_cfg["init_seed"], verify_weights=enc_cfg["verify_weights"],
        image_size=enc_cfg["image_size"],
    )


# `encoder.precision`: the frozen encoder's autocast precision. auto = measured (best_cpu_dtype);
# fp32 / bf16 force it (a feature store of the other precision is then not reused).
PRECISIONS = {"auto": None, "fp32": torch.float32, "bf16": torch.bfloat16}


def autocast_dtype(device: torch.device, precision: str = "auto") -> torch.dtype:
    """The frozen encoder's precision (feature extraction, the frozen part of a fine-tuned
    encoder, captioning new images): `precision` when forced, else bf16 autocast on GPUs and,
    on a CPU, the precision this CPU measured faster (best_cpu_dtype)."""
    if precision not in PRECISIONS:
        raise ValueError(f"encoder.precision={precision!r}; valid: {', '.join(PRECISIONS)}")
    if precision != "auto":
        return PRECISIONS[precision]
    return best_cpu_dtype() if device.type == "cpu" else torch.bfloat16


def best_cpu_dtype() -> torch.dtype:
    """The faster precision for the encoder's convolutions on this CPU, measured once and cached
    (models/precision_choice.py), not guessed from a CPU flag."""
    return calibrated_dtype("encoder")
