"""What identifies a result: fingerprints of JSON-able settings (run configs, feature caches,
generated datasets) and the code version that produced it. Standard library only, so every
layer may use it."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

# Config keys (dotted paths) that say where things go, how they are shown or how fast they run,
# not what is computed: they never change a metric, so they are left out of a run's config hash.
# Two identical runs in two run dirs (or two checkouts, or two data folders) share one hash.
NOT_HASHED = (
    "paths", "logger", "media", "compare", "hydra", "task_name", "run_name",
    "report", "extract",               # prepare_data.py's report, extract_features.py's output
    "resume",                          # continuing a run is the same experiment
    "checkpoint.every_n_steps",        # how often state is saved, not what is trained
    "trainer.default_root_dir", "trainer.enable_progress_bar", "trainer.enable_model_summary",
    "trainer.log_every_n_steps",
    "data.cache_dir", "data.root", "data.image_root",  # where files are; their content is keyed
    "data.num_workers", "encoder.num_workers",  # the sampler, not the workers, orders the data
    "encoder.weights_sha256",          # a check of the file whose fingerprint is hashed (weights_path)
)

# Paths whose *contents* decide the result: they enter the hash as a fingerprint of the file, so
# a moved file keeps its runs' hash and an edited one does not.
CONTENT_HASHED = ("init_from", "encoder.weights_path", "data.json_path", "data.split_file")

# Settings that change what a run computes and were added after runs had been recorded without
# them: a record that lacks one ran under the value here. A cell is the run of a config only if
# these agree too (compare/grid.py), so a grid under a new rule never takes an older cell for
# its own: it trains the cell anew. A new rule adds its key here with the old behaviour's value.
RULES = {
    "decoder.paired_init": False,       # shared layers' initial weights independent of the mode
    "early_stopping.smoothing": 1,      # early stopping on the raw validation score
}

# Files whose uncommitted changes can change a result (an edited README cannot).
RESULT_PATHS = ("captioning", "conf", "scripts", "train.py", "pyproject.toml")


def fingerprint(obj, length: int | None = None) -> str:
    """sha1 of the canonical JSON of `obj` (sorted keys; non-JSON values by str()), optionally
    cut to `length` hex digits."""
    digest = hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:length] if length else digest


def flatten(cfg: Mapping, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1} (empty mappings stay values): config keys as dotted paths,
    for loggers' filters, config checks and config comparisons."""
    flat = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _drop(cfg: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        cfg = cfg.get(key)
        if not isinstance(cfg, dict):
            return
    cfg.pop(last, None)


def get_dotted(cfg: dict, dotted: str):
    """cfg['a']['b'] for 'a.b'; None when any part is missing."""
    for key in dotted.split("."):
        if not isinstance(cfg, dict):
            return None
        cfg = cfg.get(key)
    return cfg


_FILE_HASHES: dict[tuple, str] = {}


def file_fingerprint(path: str | Path) -> str:
    """sha1 of a file's bytes (cached per path, size and mtime: a COCO JSON is read once per
    process); 'absent:<path>' when there is no such file (the run fails on it later)."""
    path = Path(path).expanduser()
    try:
        stat = path.stat()
    except OSError:
        return f"absent:{path}"
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _FILE_HASHES:
        digest = hashlib.sha1()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _FILE_HASHES[key] = "sha1:" + digest.hexdigest()
    return _FILE_HASHES[key]


def hashed_view(cfg: dict) -> dict:
    """What identifies a run: the resolved config without the NOT_HASHED keys, with the
    CONTENT_HASHED paths replaced by fingerprints of the files they name."""
    view = json.loads(json.dumps(cfg, default=str))  # a deep copy of plain data
    for dotted in NOT_HASHED:
        _drop(view, dotted)
    for dotted in CONTENT_HASHED:
        if (path := get_dotted(view, dotted)) is not None:
            *parents, last = dotted.split(".")
            holder = get_dotted(view, ".".join(parents)) if parents else view
            holder[last] = file_fingerprint(path)
    return view


def with_rules(flat: dict) -> dict:
    """A flat hashed config (a cell's record) with the RULES it lacks at their old values."""
    return {**{k: v for k, v in RULES.items() if k not in flat}, **flat}


def config_hash(cfg: dict) -> str:
    """The identity of a run: fingerprint of its hashed_view."""
    return fingerprint(hashed_view(cfg))


def run_stamp() -> str:
    """A run directory's name (the `run_stamp` resolver of conf/train.yaml): the start time to
    the microsecond, so parallel runs never collide; but every process of one torchrun or
    SLURM launch starts at its own microsecond, so there the launcher's job id names the run
    (torchrun: --rdzv-id, random with --standalone; else the agent's pid and port, one dir
    per node)."""
    env = os.environ
    if env.get("TORCHELASTIC_RUN_ID", "none") != "none":
        return f"torchrun-{env['TORCHELASTIC_RUN_ID']}"
    if "TORCHELASTIC_RUN_ID" in env:
        return f"torchrun-{env.get('MASTER_PORT', '0')}-{os.getppid()}"
    if "SLURM_JOB_ID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        return f"slurm-{env['SLURM_JOB_ID']}-{env.get('SLURM_STEP_ID', '0')}"
    return datetime.now().strftime("%Y-%m-%d_%H-%M-%S_%f")


def cpu_kind() -> str:
    """The CPU a result was computed on, with the instruction set that decides its speed and,
    through bf16 autocast, its numbers: "<model name> (amx|avx512|avx2|...)". Results are
    reproducible per CPU kind, not across kinds (docs/results.md)."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    kind = next((k for k, flag in (("amx", "amx_tile"), ("avx512", "avx512f"), ("avx2", "avx2"))
                 if flag in flags), platform.machine())
    return f"{name} ({kind})"


def git_commit() -> str | None:
    """HEAD of the repository the code runs from, '+dirty' when RESULT_PATHS have uncommitted
    changes; None outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(  # ":/" = pathspec from the repository root
            ["git", "status", "--porcelain", "--untracked-files=no", "--",
             *(f":/{p}" for p in RESULT_PATHS)],
            cwd=here, capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha + ("+dirty" if dirty else "")
