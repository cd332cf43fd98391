"""torchvision image encoders: images (B, 3, H, W) -> grid features (B, N, C). ResNets and
ConvNeXt-T: the last stage's grid (N = (H/32)*(W/32)); Swin-T: its last stage's windows, after its
norm; ViT-B/16: its last layer's class token, then its patch tokens (1 + N, N = (H/16)*(W/16)): the
class token is the global vector (global_first: the decoders start from it and attend over the
patches); open-clip's CLIP ViT towers give their patch tokens (models/clip_tower.py, an optional
extra). Fine-tuning (TunableEncoder) trains the last stages of
any torchvision one (encoder_specs.stage_starts). Which encoders exist and what follows from a
name: models/encoder_specs.py; weights files: models/encoder_weights.py."""

from __future__ import annotations

import torch
from torch import nn

from . import clip_tower
from .attention.position import grid_side
from .encoder_specs import ENCODERS, finetune_problem, size_problem, stage_starts
from .encoder_weights import clip_weights, file_sha256, load_pretrained
from .precision_choice import calibrated_dtype


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
    (encoder_specs.stage_starts)."""
    if family == "resnet":
        return nn.Sequential(*list(net.children())[:-2])  # drop avgpool and fc
    if family == "convnext":
        return net.features
    if family == "swin":
        return nn.Sequential(*net.features, net.norm, net.permute)  # (B, h, w, C) -> (B, C, h, w)
    if family == "clip":
        return nn.Sequential(clip_tower.ClipTokens(net))
    return nn.Sequential(_ViTTokens(net), *net.encoder.layers, _ViTOutput(net.encoder.ln))

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
            state, self.weights_id = load_pretrained(name, weights_path, verify_weights)
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
        starts = list(stage_starts(ENCODERS[kwargs["name"]]).values())
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
