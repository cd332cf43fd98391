"""train(cfg) -> metrics: the whole run, callable from train.py, tests and sweeps."""

from __future__ import annotations

import json
import logging
import statistics
import time
from pathlib import Path

import hydra
import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import WandbLogger

from ..models.attention import cross_attention_modules
from ..models.captioner import resolved_attention
from ..provenance import config_hash, git_commit
from .datamodule import CaptionDataModule
from .loggers import build_loggers, flatten, sync_hint
from .media import ValidationMedia
from .module import CaptioningModule
from .throughput import Throughput

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict:
    """Prepare data, fit, test the best checkpoint; write results.json and predictions.json."""
    start = time.time()
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    out = Path(plain["paths"]["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    if not plain["data"].get("synthetic") and not plain["encoder"].get("pretrained"):
        log.warning("data=%s with encoder.pretrained=false: a randomly initialised ResNet on real "
                    "photos gives weak features; the real-data presets set encoder.pretrained=true "
                    "(data/README.md: which weights file to copy where)", plain["data"].get("name"))
    pl.seed_everything(plain["seed"], workers=True)

    datamodule = CaptionDataModule(plain["data"], plain["encoder"])
    datamodule.prepare_data()
    datamodule.setup("fit")
    # Again: preparing data draws from the global RNG only when caches are cold (feature
    # extraction's DataLoader), so without this a first run would differ from its re-runs.
    pl.seed_everything(plain["seed"], workers=True)
    module = CaptioningModule(plain, datamodule.vocab.itos)
    module.model.normalizer.load_state_dict(datamodule.data.normalizer.state_dict())

    checkpoint = ModelCheckpoint(
        dirpath=out / "checkpoints", filename="best", monitor="val/bleu4", mode="max",
        save_last=True, auto_insert_metric_name=False,
    )
    loggers = build_loggers(plain.get("logger"))
    throughput, media = Throughput(), ValidationMedia(**plain.get("media", {}))
    callbacks = [checkpoint, throughput, media]
    if loggers:
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    trainer: pl.Trainer = hydra.utils.instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False
    )
    for logger in loggers:  # the whole resolved config, flat: every key filters in the UI
        logger.log_hyperparams(flatten({k: v for k, v in plain.items() if k != "logger"}))
    trainer.fit(module, datamodule=datamodule)
    best = "best" if checkpoint.best_model_path else None  # no validation ran: test as trained
    test = trainer.test(module, datamodule=datamodule, ckpt_path=best)

    cross = cross_attention_modules(module.model.decoder)
    results = {k: float(v) for k, v in (test[0] if test else {}).items()}
    results.update(
        wall_time_s=round(time.time() - start, 2),
        seed=plain["seed"],
        config_hash=config_hash(plain),
        git_commit=git_commit(),
        params=sum(p.numel() for p in module.model.decoder.parameters()),
        attention_params=sum(p.numel() for m in cross for p in m.parameters()),
        # What `mixed` decided at construction (equals the name for every other mode).
        attention_resolved=resolved_attention(plain),
        skipped_images=len(datamodule.data.skipped),
        skipped_image_files=[f"{path}: {why}" for path, why in datamodule.data.skipped],
        empty_captions=datamodule.data.empty_captions,
        # Step timing: the first step carries torch.compile's cost (model.compile=true).
        first_step_s=round(throughput.step_seconds[0], 3) if throughput.step_seconds else None,
        median_step_s=(round(statistics.median(throughput.step_seconds), 4)
                       if throughput.step_seconds else None),
        media_s=round(sum(media.seconds), 2),
        **{f"decode/{k}": v for k, v in plain["decode"].items()},
    )
    if trainer.is_global_zero:
        (out / "results.json").write_text(json.dumps(results, indent=2))
        (out / "predictions.json").write_text(json.dumps(module.test_predictions, indent=1))
        if datamodule.data.skipped:  # one line per skipped file: path <TAB> why
            (out / "skipped_images.txt").write_text(
                "".join(f"{path}\t{why}\n" for path, why in datamodule.data.skipped))
        log.info("results: %s", out / "results.json")
        for logger in loggers:
            if isinstance(logger, WandbLogger):
                _finish_wandb(logger, results, out, module.vocab.itos, checkpoint.best_model_path)
    return results


def _finish_wandb(logger: WandbLogger, results: dict, out: Path, vocab: list[str],
                  best: str) -> None:
    """Final metrics into the run summary, the model artifact if asked, then close the run
    (so the next train() in this process starts its own) and say how to sync it."""
    import wandb

    run = logger.experiment
    run.summary.update(results)
    if getattr(logger, "log_model_artifact", False):
        (out / "vocab.json").write_text(json.dumps(vocab))
        artifact = wandb.Artifact(f"model-{run.id}", type="model", metadata=results)
        artifact.add_file(str(best or out / "checkpoints" / "last.ckpt"), name="model.ckpt")
        artifact.add_file(str(out / "vocab.json"))
        artifact.add_file(str(out / "results.json"))
        run.log_artifact(artifact, aliases=["best"])
    offline = run.settings.mode == "offline"
    hint = sync_hint(run) if offline else None
    run.finish()
    if hint:
        log.info(hint)
