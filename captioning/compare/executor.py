"""Where the comparison's cells train: in this process (`compare.executor=local`), or as SLURM
jobs through submitit (`slurm`; `debug` runs the same submission path in this process, for
tests). The job parameters default to conf/hydra/launcher/slurm.yaml, the sweep launcher's: one
home for what a job asks for; `compare.slurm.<key>` overrides them."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from ..paths import conf_dir
from ..schema.compare import EXECUTORS

LAUNCHER_CONF = conf_dir() / "hydra" / "launcher" / "slurm.yaml"
# The launcher's key -> submitit's AutoExecutor parameter (the rest keep their names).
RENAMED = {"partition": "slurm_partition", "account": "slurm_account"}


def job_parameters(overrides: dict | None = None) -> dict:
    """The launcher's defaults with `overrides`, in submitit's names (None values dropped)."""
    params = OmegaConf.to_container(OmegaConf.load(LAUNCHER_CONF))
    params.pop("defaults", None)
    params.update(overrides or {})
    return {RENAMED.get(k, k): v for k, v in params.items() if v is not None}


def make_executor(kind: str, folder: Path, overrides: dict | None = None):
    """None for `local` (train() in this process), else a submitit executor."""
    if kind not in EXECUTORS:
        raise ValueError(f"compare.executor={kind!r}: valid: {', '.join(EXECUTORS)}")
    if kind == "local":
        return None
    try:
        import submitit
    except ImportError:
        raise ImportError('compare.executor=slurm needs submitit: pip install -e ".[cluster]"') from None
    executor = submitit.AutoExecutor(folder=str(folder), cluster=kind)
    params = job_parameters(overrides)
    if kind == "debug":  # the debug executor takes no cluster parameters
        params = {k: v for k, v in params.items() if k in ("timeout_min",)}
    executor.update_parameters(name="captioning-cell", **params)
    return executor
