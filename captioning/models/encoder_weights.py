"""An encoder's weights file: where it is looked for (never downloaded), whether it is the file
it should be (torchvision's published hashes; a config's own pin, encoder.weights_sha256), and
its content hash, the name a run records it by."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from . import clip_tower
from .encoder_specs import ENCODERS


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


def load_pretrained(name: str, weights_path: str | None, verify: bool = True) -> tuple[dict, str]:
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
