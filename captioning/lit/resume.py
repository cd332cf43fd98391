"""`resume=<run dir>|auto`: which run, whether its config allows it, and moving this invocation
into that run's directory; and `init_from=<ckpt>`'s weights."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch

from ..checkpoint import CheckpointError, checkpoint_config, model_state, read_checkpoint
from ..data.store import write_text_atomic
from ..provenance import config_hash, flatten, hashed_view
from .config_check import ConfigError

log = logging.getLogger(__name__)

RUN_FILE = "run.json"  # per run dir: config hash and the wandb run id (what resume needs)


def read_run(run_dir: Path) -> dict:
    path = run_dir / RUN_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def write_run(run_dir: Path, info: dict) -> None:
    write_text_atomic(run_dir / RUN_FILE, json.dumps(info, indent=1))


def find_run(resume: str, cfg: dict, current: Path) -> Path:
    """The run dir `resume` names; `auto`: the newest run under <log_dir>/<task_name>/ whose
    config hash is this config's (ConfigError when there is none)."""
    if resume != "auto":
        run = Path(resume).expanduser()
        if run.is_file() and run.suffix == ".ckpt":  # a checkpoint path: its run dir
            run = run.parent.parent
        if not (run / "checkpoints").is_dir():
            raise ConfigError(f"resume={resume}: not a run dir (no checkpoints/ in it); pass "
                              "<log_dir>/train/runs/<run>, or resume=auto")
        return run
    root = Path(cfg["paths"]["log_dir"]) / cfg["task_name"]
    want = config_hash(cfg)
    runs = [p.parent for p in root.glob(f"**/{RUN_FILE}")
            if p.parent.resolve() != current.resolve()
            and read_run(p.parent).get("config_hash") == want
            and any((p.parent / "checkpoints").glob("*.ckpt"))]
    if not runs:
        raise ConfigError(f"resume=auto: no run under {root} has this config's hash ({want[:12]}) "
                          "and a checkpoint; start it without resume, or pass resume=<run dir>")
    return max(runs, key=lambda r: max(c.stat().st_mtime for c in (r / "checkpoints").glob("*.ckpt")))


def config_differences(saved: dict, current: dict) -> list[str]:
    """Hashed keys whose values differ ('key: saved -> current'), except a larger
    trainer.max_epochs (the one change a resume allows) and keys the code gained since the run
    started (absent from its saved config: every new key defaults to the old behaviour, so a
    run survives a `git pull` between crash and resume)."""
    a, b = flatten(hashed_view(saved)), flatten(hashed_view(current))
    out = []
    for key in sorted(a):  # (a key only the current config has: the code gained it since)
        now = b[key] if key in b else ABSENT
        if now == a[key]:
            continue
        if key == "trainer.max_epochs" and isinstance(a[key], int) and isinstance(now, int) and now > a[key]:
            continue
        out.append(f"{key}: {a[key]!r} -> {now!r}")
    return out


ABSENT = "<absent>"  # how a diff shows a key the current config does not have


def check_resumable(ckpt: dict, path: Path, cfg: dict) -> None:
    saved, _ = checkpoint_config(ckpt, path)
    if diffs := config_differences(saved, cfg):
        raise ConfigError(
            f"resume: this config differs from the one {path} was trained with (only a larger "
            "trainer.max_epochs may change):\n  - " + "\n  - ".join(diffs)
            + "\nDrop these overrides to resume, or start a new run (init_from=<ckpt> starts "
            "one from its weights).")


def adopt_run_dir(fresh: Path, run: Path) -> None:
    """Hydra made `fresh` for this invocation: move its .hydra/ into <run>/.hydra/resumed/,
    send the log file to <run>/train.log (appending), and remove `fresh`."""
    if fresh.resolve() == run.resolve() or not fresh.exists():
        return
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == fresh.resolve():
            moved = logging.FileHandler(run / Path(handler.baseFilename).name, mode="a")
            moved.setFormatter(handler.formatter)
            moved.setLevel(handler.level)
            root.removeHandler(handler)
            handler.close()
            root.addHandler(moved)
    if (fresh / ".hydra").is_dir():
        target = run / ".hydra" / "resumed" / fresh.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(fresh / ".hydra"), target)
    leftover = [p for p in fresh.iterdir() if p.suffix != ".log"]
    if not leftover:
        shutil.rmtree(fresh)
    else:
        log.warning("resume: %s holds %s; left in place", fresh, [p.name for p in leftover])


def load_initial_weights(model: torch.nn.Module, path: str, vocab: list[str]) -> None:
    """init_from: the checkpoint's model weights (normaliser included: the decoder was trained
    on its statistics) into `model`; the vocabulary and the architecture must match."""
    ckpt = read_checkpoint(path)
    _, saved_vocab = checkpoint_config(ckpt, path)
    if saved_vocab != vocab:
        raise CheckpointError(
            f"init_from={path}: its vocabulary ({len(saved_vocab)} words) is not this dataset's "
            f"({len(vocab)} words); start from a checkpoint trained on the same data and "
            "data.min_word_freq")
    state = model_state(ckpt)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # shape mismatches: torch lists them one per line
        lines = str(err).splitlines()
        detail = lines[1].strip() if len(lines) > 1 else str(err)
        raise CheckpointError(f"init_from={path}: its model does not fit this config's "
                              f"({detail}); use the same decoder, attention and encoder "
                              "settings") from None
    if any(k.startswith("encoder.") for k in unexpected):
        raise CheckpointError(
            f"init_from={path}: its encoder was fine-tuned, so its decoder only works with that "
            "encoder: set encoder.finetune=true with the checkpoint's encoder.finetune_stages")
    if not any(k.startswith("encoder.") for k in state):
        # A checkpoint trained on frozen features: the tuned encoder starts as the network that
        # made them (the usual two-stage recipe: converge the decoder, then fine-tune).
        missing = [k for k in missing if not k.startswith("encoder.")]
    if missing or unexpected:
        raise CheckpointError(
            f"init_from={path}: its model does not fit this config's (missing: "
            f"{missing[:5]}, unexpected: {unexpected[:5]}); use the same decoder, attention and "
            "encoder settings as the checkpoint")
    log.info("init_from: weights of %s (step %s)", path, ckpt.get("global_step"))
