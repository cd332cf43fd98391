"""Where the comparison's cells train: in this process (`compare.executor=local`), or as SLURM
jobs through submitit (`slurm`; `debug` runs the same submission path in this process, for
tests). The job parameters default to conf/hydra/launcher/slurm.yaml, the sweep launcher's: one
home for what a job asks for; `compare.slurm.<key>` overrides them. Every job is waited for; a
failed one is named by its cell, its error and its log (compare.workers' jobs alike)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from omegaconf import OmegaConf

from ..paths import conf_dir
from ..schema.compare import EXECUTORS

log = logging.getLogger(__name__)

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


def wait_for(jobs: list[tuple[str, object]]) -> list[str]:
    """Wait for every (cell label, submitit job): a cell not trained by its job (held by another
    process, finished meanwhile) is logged, a failed one named with what failed and its log,
    and the others are waited for all the same. -> the failed, "label: what (log: path)"."""
    failed = []
    for label, job in jobs:
        try:
            state = job.result()
        except Exception as err:  # noqa: BLE001  (named and counted; the others go on)
            what = what_failed(err)
            failed.append(f"{label}: {what} (log: {job.paths.stderr})")
            log.error("grid: %s failed: %s (log: %s)", label, what, job.paths.stderr)
            continue
        if state != "trained":
            log.info("grid: %s %s", label, state)
    return failed


def what_failed(err: BaseException) -> str:
    """A failed job's line: the cell's own error (its exception, as submitit reports it), else
    submitit's."""
    if type(err).__name__ == "UncompletedJobError":  # no result: the process itself died
        return ("its process died without a result (killed: kill -9, the out-of-memory killer "
                "or a cluster's time limit); the next run resumes it from its checkpoint")
    lines = str(err).strip().splitlines()
    own = [k for k, ln in enumerate(lines) if re.match(r"\s*[\w.]*(Error|Exception|Fault)\b:?", ln)]
    if not own:
        return (lines[0] if lines else type(err).__name__)[:300]
    # an error that lists its problems below its first line ("bad config ...:\n  - key: why")
    listed = [ln.strip() for ln in lines[own[-1] + 1:] if ln.strip().startswith("- ")]
    return " ".join([lines[own[-1]].strip(), *listed])[:300]
