"""The training command, for a checkout (`python train.py ...`) and an installed copy
(`captioning-train ...` or `python -m captioning ...`): one Hydra entry point, configs from
captioning.paths.conf_dir()."""

from __future__ import annotations

import shutil
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from .compose_check import checked
from .errors import UserError, report_user_errors
from .lit import train
from .paths import conf_dir
from .provenance import run_stamp
from .schema import register

# The run dir's name; cached: resolved once per process.
if not OmegaConf.has_resolver("run_stamp"):
    OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True)
register()  # the config schemas the yamls name (captioning/schema/)


@checked("train")  # an override Hydra cannot compose: one line, exit status 2
@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="train")
@report_user_errors  # a bad config or file: one message, exit status 2, no traceback
def main(cfg: DictConfig) -> float:
    """Train. Returns the best validation score of `checkpoint.monitor` (val/bleu4 by default;
    its direction is checkpoint.mode): the objective a sweeper optimises (`-m` with an Optuna or
    other sweeper). Never a test score: tuning on it would be choosing on the test split. NaN
    when no validation ran."""
    try:
        best = train(cfg)["best_score"]
    except UserError:
        _remove_unstarted_run_dir()
        raise
    return float("nan") if best is None else best


# What Hydra writes into a run dir before train() is called: a refused config leaves only these
UNSTARTED = {".hydra", "train.log"}


def _remove_unstarted_run_dir() -> None:
    """A config refused before any work ("nothing was started") leaves no run dir behind: only
    Hydra's own record of the composed config and the log's first lines, which the error repeats."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    out = Path(HydraConfig.get().runtime.output_dir)
    if out.is_dir() and {p.name for p in out.iterdir()} <= UNSTARTED:
        shutil.rmtree(out, ignore_errors=True)
