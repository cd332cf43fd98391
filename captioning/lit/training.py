"""train(cfg) -> metrics: the whole run, callable from train.py, tests and sweeps."""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
import warnings
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.callbacks import EarlyStopping, LearningRateMonitor
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities import rank_zero_only

from ..data.precomputed import resolve_source
from ..device import configure_cpu
from ..models.attention import cross_attention_modules
from ..models.captioner import attention_choice
from ..provenance import config_hash, cpu_kind, flatten, git_commit
from .checkpoint_policy import AtomicCheckpointIO, RNGState, checkpoint_callbacks, newest_checkpoint
from .config_check import OWN_TRAINER_KEYS, check_config
from .console import EpochLine, quiet_lightning, summary_table
from .curve import EpochSnapshots, ValidationCurve, snapshot_path
from .datamodule import CaptionDataModule
from .loggers import build_loggers, finish_wandb, run_labels
from .media import ValidationMedia
from .mixed import BF16Mixed
from .module import CaptioningModule
from .precision import accelerator_type, resolve_precision
from .resume import adopt_run_dir, check_resumable, find_run, load_initial_weights, read_run, write_run
from .throughput import Throughput

log = logging.getLogger(__name__)


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) and its reaped children (DataLoader workers)."""
    try:
        import resource
    except ImportError:  # Windows: this process only
        return time.process_time()
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def train(cfg: DictConfig) -> dict:
    """Check the config, prepare data, fit (or resume), test the best checkpoint; write
    results.json and predictions.json."""
    configure_cpu()  # before the first parallel op: torch's threads copy it when created
    start, cpu_start = time.time(), _cpu_seconds()
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
    if plain["trainer"].get("num_threads"):  # before the first op: data prep runs the encoder
        torch.set_num_threads(plain["trainer"]["num_threads"])
    out = Path(plain["paths"]["output_dir"])
    resume_ckpt = None
    if plain.get("resume"):
        run = find_run(plain["resume"], plain, out)
        resume_ckpt, ckpt = newest_checkpoint(run)
        check_resumable(ckpt, resume_ckpt, plain)
        log.info("resuming %s from %s (epoch %s, step %s)", run, resume_ckpt.name,
                 ckpt.get("epoch"), ckpt.get("global_step"))
        del ckpt
        if rank_zero_only.rank == 0:  # DDP children share the dir: one process moves it
            adopt_run_dir(out, run)
        with open_dict(cfg):
            cfg.paths.output_dir = str(run)  # loggers, checkpoints, results: the run's own dir
        plain, out = _plain(cfg), run
    out.mkdir(parents=True, exist_ok=True)
    run_info = read_run(out) if resume_ckpt else {}
    if not plain["data"].get("synthetic") and not plain["encoder"].get("pretrained"):
        log.warning("data=%s with encoder.pretrained=false: a randomly initialised ResNet on real "
                    "photos gives weak features; the real-data presets set encoder.pretrained=true "
                    "(data/README.md: which weights file to copy where)", plain["data"].get("name"))
    pl.seed_everything(plain["seed"], workers=True)

    datamodule = CaptionDataModule(plain["data"], plain["encoder"], plain["seed"])
    datamodule.prepare_data()
    datamodule.setup("fit")
    # Again: preparing data draws from the global RNG only when caches are cold (feature
    # extraction's DataLoader), so without this a first run would differ from its re-runs.
    pl.seed_everything(plain["seed"], workers=True)
    module = CaptioningModule(plain, datamodule.vocab.itos)
    module.model.normalizer.load_state_dict(datamodule.data.normalizer.state_dict())
    if plain.get("init_from"):
        load_initial_weights(module.model, plain["init_from"], datamodule.vocab.itos)

    checkpoints = checkpoint_callbacks(out, plain)
    best_checkpoint = checkpoints[0]
    logger_cfg = dict(plain.get("logger") or {})
    tags, suffix = run_labels(plain)
    if "wandb" in logger_cfg:
        spec = dict(logger_cfg["wandb"])
        spec["tags"] = [*(spec.get("tags") or []), *tags]
        if suffix:
            spec["name"] = f"{spec.get('name') or 'run'}-{suffix}"
        if run_info.get("wandb_id"):  # the same wandb run continues
            spec["id"] = run_info["wandb_id"]
        logger_cfg["wandb"] = spec
    if suffix and "tensorboard" in logger_cfg:  # sweep jobs apart in TensorBoard's run list too
        tb = logger_cfg["tensorboard"]
        logger_cfg["tensorboard"] = {**tb, "version": f"{tb.get('version') or 'run'}-{suffix}"}
    loggers = build_loggers(logger_cfg)
    throughput, media = Throughput(), ValidationMedia(**plain.get("media", {}))
    curve = ValidationCurve()
    snapshot_epochs = list((plain.get("checkpoint") or {}).get("snapshot_epochs") or [])
    callbacks = [*checkpoints, RNGState(), throughput, media, EpochLine(best_checkpoint), curve,
                 EpochSnapshots(out, snapshot_epochs)]
    if loggers:
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    # The callbacks group (conf/callbacks/): the user's own, after ours; null entries are off.
    callbacks += [hydra.utils.instantiate(spec) for spec in (plain.get("callbacks") or {}).values() if spec]
    stop = plain.get("early_stopping") or {}
    early = None
    if stop.get("patience") is not None:
        early = EarlyStopping(monitor=best_checkpoint.monitor, mode=best_checkpoint.mode,
                              patience=stop["patience"], min_delta=stop.get("min_delta", 0.0))
        callbacks.append(early)
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg["log_every_n_steps"] = _log_every(trainer_cfg, datamodule)
    if run_info.get("train_precision") and str(trainer_cfg.get("precision")) == "auto":
        # a resumed run keeps the precision it started in, whatever a new measurement would say
        trainer_cfg["precision"] = run_info["train_precision"]
        precision_source = f"{run_info.get('train_precision_source') or 'auto'} (kept on resume)"
    else:
        trainer_cfg["precision"], precision_source = resolve_precision(
            trainer_cfg, plain, module.model, datamodule.first_train_batches, datamodule.vocab.pad)
    log.info("training precision: %s (%s)", trainer_cfg["precision"], precision_source)
    trainer = build_trainer(trainer_cfg, callbacks=callbacks, logger=loggers or False)
    wandb_ids = [lg.experiment.id for lg in loggers if isinstance(lg, WandbLogger)]
    machines = [*run_info.get("machines", []), cpu_kind()]  # every machine a part of this run trained on
    if trainer.is_global_zero:
        write_run(out, {"config_hash": config_hash(plain),
                        "wandb_id": wandb_ids[0] if wandb_ids else run_info.get("wandb_id"),
                        "resumed": run_info.get("resumed", 0) + bool(resume_ckpt),
                        "train_precision": trainer_cfg["precision"],
                        "train_precision_source": precision_source,
                        "machines": machines})
    # The whole resolved config, flat (every key filters in the UI), without Hydra's plumbing.
    hparams = {k: v for k, v in flatten({k: v for k, v in plain.items() if k != "logger"}).items()
               if not k.endswith(("._target_", "._partial_"))}
    for logger in loggers:
        logger.log_hyperparams(hparams)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_ckpt)
    # The run's course, read now: testing a checkpoint restores the callbacks' states from it.
    stopped = early.stopped_epoch if early is not None else 0  # 0-based; 0 = did not stop early
    course = {"val_curve": list(curve.curve), "epochs_trained": _epochs_trained(trainer),
              "stopped_early_after": stopped + 1 if stopped else None}
    best = curve.best(best_checkpoint.monitor, best_checkpoint.mode)
    # Test the best checkpoint; when no validation ran (or none improved), test as trained.
    # verbose=False: Lightning's float32 table gives way to ours (console.summary_table)
    test = trainer.test(module, datamodule=datamodule, verbose=False,
                        ckpt_path=best_checkpoint.best_model_path or None)

    cross = cross_attention_modules(module.model.decoder)
    # The test scores as computed (float64), not as logged (Lightning rounds to float32).
    results = dict(module.metrics.get("test", {})) if test else {}
    predictions = module.test_predictions
    at_epoch = _test_snapshots(trainer, module, datamodule, out, snapshot_epochs)
    results.update(
        wall_time_s=round(time.time() - start, 2),
        # Compute cost: CPU seconds over all threads (and reaped DataLoader workers); unlike the
        # wall time, not inflated by a paused (SIGSTOP) or time-shared run. GPU time: wall time.
        cpu_s=round(_cpu_seconds() - cpu_start, 1),
        seed=plain["seed"],
        config_hash=config_hash(plain),
        git_commit=commit,
        # Where it ran: results reproduce per CPU kind (bf16 on AMX), not across kinds.
        machine=cpu_kind(),
        machines=machines,  # killed and resumed: each part's
        # On a CPU the thread count splits float sums differently: the last digits reproduce
        # per CPU kind *and* thread count.
        threads=torch.get_num_threads(),
        accelerator=_device_name(trainer.strategy.root_device),
        # The precision the stored features were extracted in (the store is keyed by it; with
        # encoder.precision=auto a store of the other precision may have been reused).
        feature_precision=datamodule.data.features.precision,
        # The training step's precision (trainer.precision as Lightning ran it).
        train_precision=str(trainer.precision),
        train_precision_source=precision_source,  # trainer.precision, or auto's measurement
        # The captioning model's own weights: decoder and key-side refiner (not the encoder).
        params=sum(p.numel() for m in (module.model.decoder, module.model.refiner) if m is not None
                   for p in m.parameters()),
        attention_params=sum(p.numel() for m in cross for p in m.parameters()),
        # What `mixed` decided at construction (equals the name for every other mode).
        attention_resolved=attention_choice(module.model, plain["attention"]["name"]),
        skipped_images=len(datamodule.data.skipped),
        skipped_image_files=[f"{path}: {why}" for path, why in datamodule.data.skipped],
        empty_captions=datamodule.data.empty_captions,
        nonfinite_skipped_batches=module.nonfinite_skipped,
        resumed=run_info.get("resumed", 0) + bool(resume_ckpt),
        # Step timing: the first step carries torch.compile's cost (model.compile=true).
        first_step_s=round(throughput.step_seconds[0], 3) if throughput.step_seconds else None,
        median_step_s=(round(statistics.median(throughput.step_seconds), 4)
                       if throughput.step_seconds else None),
        train_captions_per_s=(round(c, 2) if (c := throughput.captions_per_s()) else None),
        media_s=round(sum(media.seconds), 2),
        # The checkpoint's selection score: what a sweep optimises (train.py returns it), never
        # a test score. None when no validation ran.
        monitor=best_checkpoint.monitor,
        best_score=(None if best_checkpoint.best_model_score is None
                    else float(best_checkpoint.best_model_score)),
        # The course of the run: every validation's scores, the epoch best.ckpt is from, how
        # many epochs ran and whether early stopping ended them (the epoch it stopped after).
        best_epoch=best["epoch"] if best else None,
        **course,
        # Snapshot epochs (checkpoint.snapshot_epochs) tested like best.ckpt; absent: not reached.
        at_epoch=at_epoch,
        **{f"decode/{k}": v for k, v in plain["decode"].items()},
    )
    if trainer.is_global_zero:
        (out / "results.json").write_text(json.dumps(results, indent=2))
        (out / "predictions.json").write_text(json.dumps(predictions, indent=1))
        if datamodule.data.skipped:  # one line per skipped file: path <TAB> why
            (out / "skipped_images.txt").write_text(
                "".join(f"{path}\t{why}\n" for path, why in datamodule.data.skipped))
        best_score = best_checkpoint.best_model_score
        log.info("%s", summary_table(results, plain.get("run_name") or out.name, out,
                                     best_checkpoint.best_model_path, best_checkpoint.monitor,
                                     None if best_score is None else float(best_score)))
        for logger in loggers:
            if isinstance(logger, WandbLogger):
                finish_wandb(logger, results, out, module.vocab.itos,
                              best_checkpoint.best_model_path)
    return results


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
                (out / f"predictions_epoch{epoch}.json").write_text(
                    json.dumps(module.test_predictions, indent=1))
    finally:
        trainer.loggers = loggers
    return scores


def _epochs_trained(trainer: pl.Trainer) -> int:
    """Epochs run to the end (a resumed run counts the killed run's too)."""
    return trainer.fit_loop.epoch_progress.current.completed


def build_trainer(trainer_cfg: dict, **kwargs) -> pl.Trainer:
    """pytorch_lightning.Trainer from the `trainer` config (our own keys left out), writing
    checkpoints atomically, with the config's other plugins (trainer.plugins: a cluster
    environment, say; config_check refuses a CheckpointIO); the data module's EpochShuffle shards
    the training set by rank (config_check refuses trainer.use_distributed_sampler=true)."""
    args = {k: v for k, v in trainer_cfg.items()
            if k not in OWN_TRAINER_KEYS and k not in ("plugins", "use_distributed_sampler")}
    if str(args.get("precision")) == "auto":  # it needs the model and data: train() resolves it
        raise ValueError("trainer.precision=auto must be resolved before the Trainer is built "
                         "(lit/precision.py: resolve_precision)")
    plugins = trainer_cfg.get("plugins") or []
    plugins = [hydra.utils.instantiate(p) for p in (plugins if isinstance(plugins, list) else [plugins])]
    if str(args.get("precision")) in ("bf16-mixed", "bf16"):  # fused AdamW + clipping: lit/mixed.py
        # autocast on the accelerator the Trainer will pick (accelerator=auto: the GPU if any)
        plugins.append(BF16Mixed(accelerator_type(args)))
        del args["precision"]
    torch.set_float32_matmul_precision(trainer_cfg.get("matmul_precision", "highest"))
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
    return max(1, min(trainer_cfg.get("log_every_n_steps", 50), steps))


def _plain(cfg: DictConfig) -> dict:
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    return plain


def _device_name(device: torch.device) -> str | None:
    """The accelerator's name ("NVIDIA H200", ...) from its torch backend; None on the CPU."""
    if device.type == "cpu":
        return None
    get = getattr(getattr(torch, device.type, None), "get_device_name", None)
    return get(device) if get else device.type
