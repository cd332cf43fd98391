"""Experiment loggers from the `logger` config group: wandb (online when logged in, offline
otherwise, never fatal), TensorBoard and CSV, any number at once."""

from __future__ import annotations

import csv
import json
import logging
import netrc
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

import hydra
from pytorch_lightning.loggers import CSVLogger, Logger, WandbLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from ..data.store import write_text_atomic

log = logging.getLogger(__name__)


def _logged_in() -> bool:
    """An API key in the environment, or one stored by `wandb login` (~/.netrc or $NETRC)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode(requested: str = "auto") -> tuple[str, str]:
    """(mode, reason): WANDB_MODE wins, then logger.mode, then online only when logged in."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"], "WANDB_MODE"
    if requested != "auto":
        return requested, "logger.mode"
    if _logged_in():
        return "online", "an API key is configured"
    return "offline", "no API key (WANDB_API_KEY or `wandb login`)"


def sync_hint(run) -> str:
    """The one line an offline run needs: where it is and how to upload it."""
    where = Path(run.dir).parent.resolve()  # <save_dir>/wandb/offline-run-*/
    return f"wandb run is offline, saved in {where}; upload it later with: wandb sync {where}"


def wandb_logger(
    project: str = "captioning",
    save_dir: str = ".",
    mode: str = "auto",
    name: str | None = None,
    group: str | None = None,
    tags: list[str] | None = None,
    job_type: str = "train",
    entity: str | None = None,
    log_model: bool = False,
    init_timeout: float = 10.0,
    id: str | None = None,  # noqa: A002 - wandb's name; set by train() when a run resumes
) -> WandbLogger | None:
    """A WandbLogger over a run started here, so a failure can fall back instead of killing
    training: online -> offline (warned once) -> no wandb at all (the other loggers go on).

    `log_model` is handled by train() (checkpoint + vocabulary as one artifact), not by Lightning.
    """
    import wandb

    mode, why = wandb_mode(mode)
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    kwargs = dict(project=project, entity=entity, dir=save_dir, name=name, group=group,
                  tags=list(tags or []), job_type=job_type, reinit="finish_previous")
    if id:  # a resumed run continues its wandb run (offline: the same run id, synced as one)
        kwargs.update(id=id, resume="allow")
    run = None
    log.info("wandb: starting in %s mode (%s)", mode, why)
    try:
        # quiet: wandb's own banner lines go; ours say where the run is and, at the end, how to sync
        run = wandb.init(mode=mode, settings=wandb.Settings(init_timeout=init_timeout, quiet=True),
                         **kwargs)
    except Exception as err:  # bad key, unreachable server, ...: never fatal
        if mode == "online":
            log.warning("wandb could not start online (%s: %s); logging offline instead",
                        type(err).__name__, str(err).splitlines()[0][:200])
            try:
                run = wandb.init(mode="offline", **kwargs)
            except Exception as err2:
                log.warning("wandb offline failed too (%s); continuing without wandb", err2)
        else:
            log.warning("wandb could not start (%s: %s); continuing without wandb",
                        type(err).__name__, err)
    if run is None:
        return None
    if run.settings.mode == "offline":  # the sync command is printed once, when the run ends
        log.info("wandb: offline run in %s (%s)", Path(run.dir).parent.resolve(), why)
    logger = WandbLogger(experiment=run, save_dir=save_dir, log_model=False)
    logger.log_model_artifact = log_model  # read by train()
    return logger


class _AppendingWriter(ExperimentWriter):
    """Lightning's CSV writer deletes an existing metrics.csv; a resumed run appends to it
    (starting from its header, so old and new rows share the columns)."""

    def _check_log_dir_exists(self) -> None:
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as f:
                self.metrics_keys = next(csv.reader(f), [])


class ResumableCSVLogger(CSVLogger):
    """pytorch_lightning's CSVLogger, appending to the run's metrics.csv when it exists."""

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment


def run_labels(cfg: dict) -> tuple[list[str], str]:
    """(extra wandb tags, run-name suffix) that tell runs apart: `debug` for the debug presets;
    in a Hydra multirun the sweep's id as a tag and sweep id + job number in the name."""
    tags, suffix = (["debug"] if cfg.get("task_name") == "debug" else []), ""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        sweep = Path(HydraConfig.get().sweep.dir).name
        tags.append(f"sweep={sweep}")
        suffix = f"{sweep}-{HydraConfig.get().job.num}"
    return tags, suffix


def run_loggers(plain: dict, wandb_id: str | None = None) -> list[Logger]:
    """The run's loggers from its `logger` config, labelled (run_labels: sweep jobs apart by
    tags and name suffixes); `wandb_id`: the wandb run a resumed run continues."""
    logger_cfg = dict(plain.get("logger") or {})
    tags, suffix = run_labels(plain)
    if "wandb" in logger_cfg:
        spec = dict(logger_cfg["wandb"])
        spec["tags"] = [*(spec.get("tags") or []), *tags]
        if suffix:
            spec["name"] = f"{spec.get('name') or 'run'}-{suffix}"
        if wandb_id:  # the same wandb run continues
            spec["id"] = wandb_id
        logger_cfg["wandb"] = spec
    if suffix and "tensorboard" in logger_cfg:  # sweep jobs apart in TensorBoard's run list too
        tb = logger_cfg["tensorboard"]
        logger_cfg["tensorboard"] = {**tb, "version": f"{tb.get('version') or 'run'}-{suffix}"}
    return build_loggers(logger_cfg)


def build_loggers(cfg: Mapping | None) -> list[Logger]:
    """Instantiate every logger of the `logger` group ({name: {_target_: ...}}); a builder may
    return None (wandb that could not start), which is dropped."""
    loggers = []
    for name, spec in (cfg or {}).items():
        if not isinstance(spec, Mapping) or "_target_" not in spec:
            raise ValueError(f"logger.{name} has no _target_; see conf/logger/*.yaml for examples")
        logger = hydra.utils.instantiate(spec)
        if logger is not None:
            loggers.append(logger)
    return loggers


def finish_wandb(logger: WandbLogger, results: dict, out: Path, vocab: list[str],
                  best: str) -> None:
    """Final metrics into the run summary, the model artifact if asked, then close the run
    (so the next train() in this process starts its own) and say how to sync it."""
    import wandb

    run = logger.experiment
    run.summary.update(results)
    if getattr(logger, "log_model_artifact", False):
        write_text_atomic(out / "vocab.json", json.dumps(vocab))
        artifact = wandb.Artifact(f"model-{run.id}", type="model", metadata=results)
        staged = stage_artifact(out / "artifacts" / artifact.name, {
            "model.ckpt": Path(best or out / "checkpoints" / "last.ckpt"),
            "vocab.json": out / "vocab.json", "results.json": out / "results.json"})
        for name, path in staged.items():
            # immutable: wandb uploads from our staged copy instead of copying it to its own
            # staging dir in the home directory; skip_cache: and no second copy in ~/.cache
            artifact.add_file(str(path), name=name, policy="immutable", skip_cache=True)
        run.log_artifact(artifact, aliases=["best"])
    offline = run.settings.mode == "offline"
    hint = sync_hint(run) if offline else None
    run.finish()
    if hint:
        log.info(hint)


def stage_artifact(folder: Path, files: dict[str, Path]) -> dict[str, Path]:
    """Freeze the artifact's files inside the run dir until wandb uploads them (at the end of an
    online run, or at `wandb sync` of an offline one): hard links where the file system allows
    (no extra disk: a resumed run replaces best.ckpt by a new file, the link keeps this one),
    copies elsewhere. -> {name in the artifact: staged path}."""
    folder.mkdir(parents=True, exist_ok=True)
    staged = {}
    for name, src in files.items():
        dst = folder / name
        dst.unlink(missing_ok=True)
        try:
            os.link(src, dst)
        except OSError:  # another file system, or no hard links
            shutil.copy2(src, dst)
        staged[name] = dst
    return staged
