"""train(cfg) -> metrics: the whole run, callable from train.py, tests and sweeps."""

from __future__ import annotations

import json
import logging
import math
import time
import warnings
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities import rank_zero_only

from ..data.precomputed import resolve_source
from ..data.store import write_text_atomic
from ..models.cpu_speed import configure_cpu
from ..provenance import config_hash, cpu_kind, flatten, git_commit
from ..schema.fields import defaults
from ..schema.run import OWN_TRAINER_KEYS, Trainer
from .auto_precision import accelerator_type, resolve_precision
from .bf16_plugin import BF16Mixed
from .checkpoint_policy import AtomicCheckpointIO, newest_checkpoint
from .config_check import check_config
from .console import quiet_lightning, summary_table
from .datamodule import CaptionDataModule, images_reached
from .faults import CheckpointOnStop, reported_faults
from .learning_curve import snapshot_path
from .loggers import finish_wandb, run_loggers
from .module import CaptioningModule
from .results import RunFacts, build_results
from .resume import adopt_run_dir, check_resumable, find_run, load_initial_weights, read_run, write_run
from .run_callbacks import RunCallbacks
from .throughput import cpu_seconds

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict:
    """Check the config, prepare data, fit (or resume), test the best checkpoint; write
    results.json and predictions.json."""
    configure_cpu()  # before the first parallel op: torch's threads copy it when created
    start, cpu_start = time.time(), cpu_seconds()
    commit = git_commit()  # the code as it was loaded: the tree may change while this runs
    quiet_lightning()
    if cfg.encoder.get("finetune"):  # its BatchNorm layers are in eval mode on purpose
        warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")
    plain = _plain(cfg)
    if plain["encoder"]["name"] == "precomputed":  # the width is the files': read before any model
        with open_dict(cfg):
            cfg.encoder.dim = resolve_source(plain["encoder"], plain["attention"])
        plain = _plain(cfg)
    check_config(plain)  # every mistake the config alone shows, before any work
    if plain["trainer"]["num_threads"]:  # before the first op: data prep runs the encoder
        torch.set_num_threads(plain["trainer"]["num_threads"])
    resume_ckpt = _resume_point(cfg, plain)  # resume=<run>: its checkpoint, and its dir becomes ours
    if resume_ckpt is not None:  # Lightning checks the dataloader for a saved position; ours is
        # the DataModule's (lit/datamodule.py: state_dict), restored mid-epoch, so its warning that
        # the run cannot resume there exactly is wrong (tests/test_resume.py: resumed == unstopped)
        warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before")
    plain = _plain(cfg)
    out = Path(plain["paths"]["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    # a full disk, a store changed under the run, a killed worker: one line and the resume
    with reported_faults(out):
        return _fit_and_test(cfg, plain, out, resume_ckpt, start, cpu_start, commit)


def _fit_and_test(cfg: DictConfig, plain: dict, out: Path, resume_ckpt: Path | None, start: float,
                  cpu_start: float, commit: str | None) -> dict:
    """train()'s work once the config is checked and the run dir known."""
    run_info = read_run(out) if resume_ckpt else {}
    if not plain["data"].get("synthetic") and not plain["encoder"].get("pretrained"):
        log.warning("data=%s with encoder.pretrained=false: a randomly initialised ResNet on real "
                    "photos gives weak features; the real-data presets set encoder.pretrained=true "
                    "(data/README.md: which weights file to copy where)", plain["data"].get("name"))
    pl.seed_everything(plain["seed"], workers=True)

    datamodule = CaptionDataModule(plain["data"], plain["encoder"], plain["seed"],
                                   images_reached(plain["trainer"], plain["data"]))
    datamodule.prepare_data()
    datamodule.setup("fit")
    # Again: preparing data draws from the global RNG only when caches are cold (feature
    # extraction's DataLoader), so without this a first run would differ from its re-runs.
    pl.seed_everything(plain["seed"], workers=True)
    module = CaptioningModule(plain, datamodule.vocab.itos)
    module.model.normalizer.load_state_dict(datamodule.data.normalizer.state_dict())
    if plain.get("init_from"):
        load_initial_weights(module.model, plain["init_from"], datamodule.vocab.itos)

    loggers = run_loggers(plain, run_info.get("wandb_id"))
    run_cbs = RunCallbacks.from_config(plain, out, bool(loggers), cpu_start, start)
    best_checkpoint = run_cbs.best
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg["log_every_n_steps"] = _log_every(trainer_cfg, datamodule)
    trainer_cfg["precision"], precision_source = _precision(trainer_cfg, plain, run_info, module,
                                                            datamodule)
    log.info("training precision: %s (%s)", trainer_cfg["precision"], precision_source)
    trainer = build_trainer(trainer_cfg, logger=loggers or False,
                            callbacks=[*run_cbs.all, CheckpointOnStop(out / "checkpoints" / "last.ckpt")])
    wandb_ids = [lg.experiment.id for lg in loggers if isinstance(lg, WandbLogger)]
    machines = [*run_info.get("machines", []), cpu_kind()]  # every machine a part of this run trained on
    # and the code of each part (a killed run may be resumed by newer code)
    commits = [*(run_info.get("commits") or [None] * len(run_info.get("machines", []))), commit]
    if trainer.is_global_zero:
        write_run(out, {"config_hash": config_hash(plain),
                        "wandb_id": wandb_ids[0] if wandb_ids else run_info.get("wandb_id"),
                        "resumed": run_info.get("resumed", 0) + bool(resume_ckpt),
                        "train_precision": trainer_cfg["precision"],
                        "train_precision_source": precision_source,
                        "machines": machines, "commits": commits})
    # The whole resolved config, flat (every key filters in the UI), without Hydra's plumbing.
    hparams = {k: v for k, v in flatten({k: v for k, v in plain.items() if k != "logger"}).items()
               if not k.endswith(("._target_", "._partial_"))}
    for logger in loggers:
        logger.log_hyperparams(hparams)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_ckpt)
    # The run's course, read now: testing a checkpoint restores the callbacks' states from it.
    course = run_cbs.course(trainer)
    # Test the best checkpoint; when no validation ran (or none improved), test as trained.
    # verbose=False: Lightning's float32 table gives way to ours (console.summary_table)
    test = trainer.test(module, datamodule=datamodule, verbose=False,
                        ckpt_path=best_checkpoint.best_model_path or None)

    # The test scores as computed (float64), not as logged (Lightning rounds to float32).
    scores = dict(module.metrics.get("test", {})) if test else {}
    predictions = module.test_predictions
    at_epoch = _test_snapshots(trainer, module, datamodule, out, run_cbs.snapshot_epochs)
    results = build_results(
        scores, plain, trainer=trainer, module=module, data=datamodule.data, cbs=run_cbs,
        course=course, at_epoch=at_epoch, run=RunFacts(
            start=start, cpu_start=cpu_start, commit=commit, machines=machines, commits=commits,
            resumed=run_info.get("resumed", 0) + bool(resume_ckpt),
            precision_source=precision_source))
    if trainer.is_global_zero:
        _write_outputs(out, results, predictions, datamodule.data.skipped)
        best_score = best_checkpoint.best_model_score
        log.info("%s", summary_table(results, plain.get("run_name") or out.name, out,
                                     best_checkpoint.best_model_path, best_checkpoint.monitor,
                                     None if best_score is None else float(best_score)))
        for logger in loggers:
            if isinstance(logger, WandbLogger):
                finish_wandb(logger, results, out, module.vocab.itos,
                              best_checkpoint.best_model_path)
    return results


def _resume_point(cfg: DictConfig, plain: dict) -> Path | None:
    """resume=<run>: the checkpoint to continue from (checked against this config), with
    paths.output_dir moved to that run's dir (Hydra's fresh one adopted into it); else None."""
    if not plain.get("resume"):
        return None
    out = Path(plain["paths"]["output_dir"])
    run = find_run(plain["resume"], plain, out)
    resume_ckpt, ckpt = newest_checkpoint(run)
    check_resumable(ckpt, resume_ckpt, plain)
    log.info("resuming %s from %s (epoch %s, step %s)", run, resume_ckpt.name,
             ckpt.get("epoch"), ckpt.get("global_step"))
    if rank_zero_only.rank == 0:  # DDP children share the dir: one process moves it
        adopt_run_dir(out, run)
    with open_dict(cfg):
        cfg.paths.output_dir = str(run)  # loggers, checkpoints, results: the run's own dir
    return resume_ckpt


def _precision(trainer_cfg: dict, plain: dict, run_info: dict, module: CaptioningModule,
               datamodule: CaptionDataModule) -> tuple[str, str]:
    """The training precision and why: a resumed run keeps the one it started in (whatever a
    new measurement would say), else trainer.precision (auto: measured, lit/auto_precision.py)."""
    if run_info.get("train_precision") and str(trainer_cfg.get("precision")) == "auto":
        return (run_info["train_precision"],
                f"{run_info.get('train_precision_source') or 'auto'} (kept on resume)")
    return resolve_precision(trainer_cfg, plain, module.model, datamodule.first_train_batches,
                             datamodule.vocab.pad)


def _write_outputs(out: Path, results: dict, predictions: list[dict],
                   skipped: list[tuple[str, str]]) -> None:
    """results.json, predictions.json and, when files were skipped, skipped_images.txt (one
    line per file: path <TAB> why)."""
    # predictions first: a finished results.json means every output is there
    write_text_atomic(out / "predictions.json", json.dumps(predictions, indent=1))
    if skipped:
        write_text_atomic(out / "skipped_images.txt", "".join(f"{path}\t{why}\n" for path, why in skipped))
    write_text_atomic(out / "results.json", json.dumps(results, indent=2))


def _test_snapshots(trainer: pl.Trainer, module: CaptioningModule, datamodule: CaptionDataModule,
                    out: Path, epochs: list[int]) -> dict:
    """Test each snapshot (checkpoint.snapshot_epochs) as best.ckpt was tested -> {epoch: test
    scores}; its captions into predictions_epoch<N>.json. Epochs the run did not reach (early
    stopping) are left out."""
    scores, loggers = {}, trainer.loggers
    trainer.loggers = []  # the loggers' test/* are best.ckpt's: these go to results.json only
    try:
        for epoch in sorted(set(epochs)):
            path = snapshot_path(out, epoch)
            if not path.is_file():
                continue
            trainer.test(module, datamodule=datamodule, verbose=False, ckpt_path=str(path))
            scores[str(epoch)] = dict(module.metrics.get("test", {}))
            if trainer.is_global_zero:
                write_text_atomic(out / f"predictions_epoch{epoch}.json",
                                  json.dumps(module.test_predictions, indent=1))
    finally:
        trainer.loggers = loggers
    return scores


def build_trainer(trainer_cfg: dict, **kwargs) -> pl.Trainer:
    """pytorch_lightning.Trainer from the `trainer` config (our own keys left out), writing
    checkpoints atomically, with the config's other plugins (trainer.plugins: a cluster
    environment, say; config_check refuses a CheckpointIO); the data module's EpochShuffle shards
    the training set by rank (config_check refuses trainer.use_distributed_sampler=true)."""
    own = defaults(Trainer)  # a hand-written dict: our own keys at their defaults
    trainer_cfg = {**{k: own[k] for k in OWN_TRAINER_KEYS}, **trainer_cfg}
    args = {k: v for k, v in trainer_cfg.items()
            if k not in OWN_TRAINER_KEYS and k not in ("plugins", "use_distributed_sampler")}
    if str(args.get("precision")) == "auto":  # it needs the model and data: train() resolves it
        raise ValueError("trainer.precision=auto must be resolved before the Trainer is built "
                         "(lit/auto_precision.py: resolve_precision)")
    plugins = trainer_cfg.get("plugins") or []
    plugins = [hydra.utils.instantiate(p) for p in (plugins if isinstance(plugins, list) else [plugins])]
    if str(args.get("precision")) in ("bf16-mixed", "bf16"):  # fused AdamW + clipping: lit/bf16_plugin.py
        # autocast on the accelerator the Trainer will pick (accelerator=auto: the GPU if any)
        plugins.append(BF16Mixed(accelerator_type(args)))
        del args["precision"]
    torch.set_float32_matmul_precision(trainer_cfg["matmul_precision"])
    return hydra.utils.instantiate(args, plugins=[AtomicCheckpointIO(), *plugins],
                                   use_distributed_sampler=False, **kwargs)


def _log_every(trainer_cfg: dict, datamodule: CaptionDataModule) -> int:
    """log_every_n_steps, but never more than an epoch's steps: a short run (debug=fast, a
    handful of images) still draws its train/* curves."""
    images = len(datamodule.data.split_indices("train"))
    steps = math.ceil(images / datamodule.data_cfg["batch_size"])
    limit = trainer_cfg.get("limit_train_batches")
    if isinstance(limit, int) and not isinstance(limit, bool):
        steps = min(steps, limit)
    elif isinstance(limit, float):
        steps = max(1, int(steps * limit))
    return max(1, min(trainer_cfg["log_every_n_steps"], steps))


def _plain(cfg: DictConfig) -> dict:
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    return plain
