"""What identifies a result: fingerprints of JSON-able settings (run configs, feature caches,
generated datasets) and the code version that produced it. Standard library only, so every
layer may use it."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

# Config keys that say where things go or how they are shown, not what is computed: they never
# change a metric, so they are left out of a run's config hash.
NOT_HASHED = ("paths", "logger", "media", "compare", "hydra")

# Files whose uncommitted changes can change a result (an edited README cannot).
RESULT_PATHS = ("captioning", "conf", "scripts", "train.py", "pyproject.toml")


def fingerprint(obj, length: int | None = None) -> str:
    """sha1 of the canonical JSON of `obj` (sorted keys; non-JSON values by str()), optionally
    cut to `length` hex digits."""
    digest = hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:length] if length else digest


def config_hash(cfg: dict) -> str:
    """The identity of a run: fingerprint of the resolved config without the NOT_HASHED keys."""
    return fingerprint({k: v for k, v in cfg.items() if k not in NOT_HASHED})


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
