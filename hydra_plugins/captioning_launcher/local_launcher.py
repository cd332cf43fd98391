"""`python train.py -m hydra/launcher=local ...`: a sweep's runs on this machine through
submitit's local executor (the submitit_local launcher's jobs, each its own process), at most
`hydra.launcher.parallelism` at once; each on its own GPU (`CUDA_VISIBLE_DEVICES`; several runs
per GPU when parallelism exceeds them) or, without GPUs, on cores // parallelism threads.
submitit_local as it ships starts every run at once, all on GPU 0, and stops each after 60 min.

The scheduling is the comparison grid's (captioning/compare/workers.py: run_pool): a run that
fails is reported by Hydra with the others finished; SIGTERM to the sweep reaches every running
run (each writes last.ckpt and exits 75).

No `from __future__ import annotations`: Hydra loads plugin modules outside sys.modules,
where dataclasses cannot resolve string annotations."""

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher

log = logging.getLogger(__name__)


@dataclass
class ParallelLocalConf(LocalQueueConf):
    _target_: str = "hydra_plugins.captioning_launcher.local_launcher.ParallelLocalLauncher"
    timeout_min: int = 7 * 24 * 60  # a run goes until it finishes
    parallelism: int = 2            # runs at once


ConfigStore.instance().store(group="hydra/launcher", name="parallel_local_schema",
                             node=ParallelLocalConf, provider="captioning")


class ParallelLocalLauncher(LocalLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit

        from captioning.compare.workers import gpu_count, run_pool

        params = dict(self.params)
        workers = int(params.pop("parallelism"))
        if workers < 1:
            raise ValueError(f"hydra.launcher.parallelism={workers}: give 1 or more")
        gpus = gpu_count()
        threads = None if gpus else max(1, (os.cpu_count() or 1) // workers)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        executor = submitit.LocalExecutor(folder=params["submitit_folder"])
        log.info("launcher local: %d runs, %d at once, %s -> %s", len(job_overrides), workers,
                 f"one of {gpus} GPUs each" if gpus else f"{threads} threads each", sweep_dir)
        results = {}
        items = list(enumerate(job_overrides, initial_job_idx))

        def submit(item, slot: int):
            idx, overrides = item
            log.info("\t#%d (worker %d%s): %s", idx, slot, f", GPU {slot % gpus}" if gpus else "",
                     " ".join(filter_overrides(overrides)))
            return executor.submit(self, list(overrides), "hydra.sweep.dir", idx,
                                   f"job_id_for_{idx}", Singleton.get_state())

        def finished(item, job: Any) -> None:
            results[item[0]] = job.result()  # a JobReturn; a failed run's holds its error

        stopping = []
        run_pool(executor, items, workers, gpus, threads, submit, finished, stopping)
        if stopping:  # every run wrote its checkpoint; the scheduler sees a non-zero exit
            from captioning.errors import FAULT_EXIT

            log.error("launcher local: SIGTERM received; the running runs checkpointed where they "
                      "stood (each resumes with resume=<its run dir>)")
            raise SystemExit(FAULT_EXIT)
        return [results[idx] for idx, _ in items]
