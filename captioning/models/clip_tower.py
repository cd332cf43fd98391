"""CLIP image towers through open-clip-torch, an optional extra (`pip install -e ".[clip]"`):
`encoder=clip_vit_b_32` or `clip_vit_b_16` read an image as CLIP's vision transformer does and
give its last layer's patch tokens, after its final norm and before the projection into the text
space: a grid of 768-d keys, as torchvision's ViT gives (the class token, pooled into CLIP's
image embedding, is left out). open_clip is imported only when a tower is built, so the rest of
the project never needs it. Weights: open-clip's own file (no downloads here), by
`encoder.weights_path`, named in records by its content hash (there are no published hashes to
check it against: `encoder.verify_weights` applies to torchvision's files); random init in tests.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from .attention.position import grid_side

# open-clip's model names, and CLIP's own input normalisation (not ImageNet's)
MODELS = {"clip_vit_b_32": "ViT-B-32", "clip_vit_b_16": "ViT-B-16"}
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def open_clip_module():
    try:
        import open_clip
    except ImportError:
        raise ImportError('the CLIP encoders need open-clip-torch, an optional extra: '
                          'pip install -e ".[clip]" '
                          "(or use a torchvision encoder: encoder=vit_b_16)") from None
    return open_clip


def random_init_id() -> str:
    """What a random tower depends on besides its seed: torch's and open_clip's init code."""
    return f"torch{torch.__version__}-open_clip{open_clip_module().__version__}"


def build_tower(name: str, weights: None = None, image_size: int = 224) -> nn.Module:
    """The image tower of CLIP model `name` built for `image_size`-px input, randomly initialised
    from torch's current random state (its caller seeds it). `weights` stands where torchvision's
    builders take theirs: always None (load_tower_weights loads a file)."""
    open_clip = open_clip_module()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its "no pretrained weights loaded" warning: random init is asked for
    try:
        model = open_clip.create_model(MODELS[name], pretrained=None, force_image_size=image_size)
    finally:
        root.setLevel(level)
    return model.visual


def load_tower_weights(tower: nn.Module, path: Path) -> None:
    """An open-clip CLIP checkpoint's `visual.*` weights into `tower` (read safely: safetensors,
    or torch.load with weights_only), its position embeddings resized to the tower's grid where
    the image size differs from the file's."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
        state = state.get("state_dict", state) if isinstance(state, dict) else state
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a CLIP checkpoint (a state dict of tensors was expected)")
    state = {k.removeprefix("module."): v for k, v in state.items()}
    if "visual.positional_embedding" not in state:
        raise ValueError(f"{path}: no 'visual.*' weights of a CLIP vision transformer in it: not an "
                         "open-clip CLIP file (open_clip_pytorch_model.bin / .safetensors)")
    open_clip_module().model.resize_pos_embed(state, nn.ModuleDict({"visual": tower}))
    visual = {k.removeprefix("visual."): v for k, v in state.items() if k.startswith("visual.")}
    tower.load_state_dict(visual)  # strict: a file of another CLIP model fails here, naming keys


class ClipTokens(nn.Module):
    """A CLIP tower's patch tokens as a square grid: images (B, 3, S, S) -> (B, D, h, w)."""

    def __init__(self, tower: nn.Module) -> None:
        super().__init__()
        self.tower = tower
        tower.output_tokens = True  # (pooled, tokens) instead of the pooled embedding alone

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, tokens = self.tower(x)  # (B, N, D): after ln_post, before the projection
        side = grid_side(tokens.shape[1], "CLIP's patch tokens")
        return tokens.transpose(1, 2).reshape(len(x), -1, side, side)  # (B, D, h, w)
