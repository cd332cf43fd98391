"""Where the project's configs are, installed or in a checkout. Standard library only."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def conf_dir() -> Path:
    """The Hydra configs: `captioning/conf/` in an installed copy (`pip install .` packages the
    checkout's top-level `conf/` there: pyproject.toml), else the checkout's `conf/`."""
    installed = _HERE / "conf"
    return installed if (installed / "train.yaml").is_file() else _HERE.parent / "conf"
