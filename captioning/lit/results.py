"""A training run's results.json: the test scores and everything a reader needs to trust and
reproduce them (where and how it ran, the model's size, what was skipped, the run's course)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import pytorch_lightning as pl
import torch

from ..data.prepare import PreparedData
from ..models.attention import cross_attention_modules
from ..models.captioner import attention_choice
from ..models.encoder_weights import file_sha256
from ..provenance import config_hash, cpu_kind
from .module import CaptioningModule
from .run_callbacks import RunCallbacks
from .throughput import cpu_seconds


@dataclass
class RunFacts:
    """What train() knows of the run beside the Trainer: when it started (wall and CPU clock),
    the code it loaded, every machine it trained on and each part's code, how often it was
    resumed, and why it trains in its precision."""

    start: float
    cpu_start: float
    commit: str | None
    machines: list[str]
    commits: list[str | None]
    resumed: int
    precision_source: str


def device_name(device: torch.device) -> str | None:
    """The accelerator's name ("NVIDIA H200", ...) from its torch backend; None on the CPU."""
    if device.type == "cpu":
        return None
    get = getattr(getattr(torch, device.type, None), "get_device_name", None)
    return get(device) if get else device.type


def _weights_sha256(enc_cfg: dict) -> str | None:
    path = enc_cfg.get("weights_path") if enc_cfg.get("pretrained") else None
    return file_sha256(path) if path else None


def build_results(scores: dict, plain: dict, *, trainer: pl.Trainer, module: CaptioningModule,
                  data: PreparedData, cbs: RunCallbacks, course: dict, at_epoch: dict,
                  run: RunFacts) -> dict:
    """results.json's contents: `scores` (best.ckpt's test, float64), then the run's facts."""
    steps = cbs.throughput.step_seconds
    best_score = cbs.best.best_model_score
    cross = cross_attention_modules(module.model.decoder)
    return {
        **scores,
        # Wall seconds of the whole run: a resumed run's include its killed parts (each up to
        # its last checkpoint), not the time between them.
        "wall_time_s": round(course["wall_time_s_earlier_parts"] + time.time() - run.start, 2),
        # Compute cost: CPU seconds over all threads (and reaped DataLoader workers); unlike the
        # wall time, not inflated by a paused (SIGSTOP) or time-shared run. GPU time: wall time.
        # A resumed run's includes its killed parts (course: cpu_s_earlier_parts).
        "cpu_s": round(course["cpu_s_earlier_parts"] + cpu_seconds() - run.cpu_start, 1),
        "seed": plain["seed"],
        "config_hash": config_hash(plain),
        "git_commit": run.commit,  # the last part's; each part's: commits
        "commits": run.commits,  # None: a part recorded before runs kept their parts' commits
        # Where it ran: results reproduce per CPU kind (bf16 on AMX), not across kinds.
        "machine": cpu_kind(),
        "machines": run.machines,  # killed and resumed: each part's
        # On a CPU the thread count splits float sums differently: the last digits reproduce
        # per CPU kind *and* thread count.
        "threads": torch.get_num_threads(),
        "accelerator": device_name(trainer.strategy.root_device),
        # The precision the stored features were extracted in (the store is keyed by it; with
        # encoder.precision=auto a store of the other precision may have been reused).
        "feature_precision": data.features.precision,
        # The encoder's weights file, whole sha256 (a learned encoder's cells differ by it); None
        # for a random encoder (weights_id says which) or precomputed features.
        "encoder_sha256": _weights_sha256(plain["encoder"]),
        # The training step's precision (trainer.precision as Lightning ran it).
        "train_precision": str(trainer.precision),
        "train_precision_source": run.precision_source,  # trainer.precision, or auto's measurement
        # The captioning model's own weights: decoder and key-side refiner (not the encoder).
        "params": sum(p.numel() for m in (module.model.decoder, module.model.refiner) if m is not None
                      for p in m.parameters()),
        "attention_params": sum(p.numel() for m in cross for p in m.parameters()),
        # What `mixed` decided at construction (equals the name for every other mode).
        "attention_resolved": attention_choice(module.model, plain["attention"]["name"]),
        "skipped_images": len(data.skipped),
        "skipped_image_files": [f"{path}: {why}" for path, why in data.skipped],
        "empty_captions": data.empty_captions,
        "nonfinite_skipped_batches": module.nonfinite_skipped,
        "resumed": run.resumed,
        # Step timing: the first step carries torch.compile's cost (model.compile=true).
        "first_step_s": round(steps[0], 3) if steps else None,
        "median_step_s": round(statistics.median(steps), 4) if steps else None,
        "train_captions_per_s": round(c, 2) if (c := cbs.throughput.captions_per_s()) else None,
        "media_s": round(sum(cbs.media.seconds), 2),
        # The checkpoint's selection score: what a sweep optimises (train.py returns it), never
        # a test score. None when no validation ran.
        "monitor": cbs.best.monitor,
        "best_score": None if best_score is None else float(best_score),
        # The course of the run: the epoch best.ckpt is from, every validation's scores, how
        # many epochs ran and whether early stopping ended them (the epoch it stopped after).
        **course,
        # Snapshot epochs (checkpoint.snapshot_epochs) tested like best.ckpt; absent: not reached.
        "at_epoch": at_epoch,
        **{f"decode/{k}": v for k, v in plain["decode"].items()},
    }
