"""The LightningModule. Training: teacher-forced cross-entropy (label smoothing, scheduled
sampling, the doubly stochastic penalty) or a self-critical step (lit/scst.py), with a guard
that stops or skips on a non-finite loss. Validation and test: decode (greedy for validation,
the run's `decode` settings for test) and score (BLEU, CIDEr-D, attribute accuracy, grounding,
attention statistics), gathered over processes so any number of them gives the same numbers.
The optimiser and its schedules are built in lit/optimizers.py."""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from ..checkpoint import FORMAT_VERSION
from ..data.vocab import Vocabulary
from ..metrics.grounding import attention_grounding
from ..metrics.scoring import caption_metrics
from ..models.attention import (
    ATTENTION_STATS,
    attention_step_stats,
    cross_attention_modules,
    doubly_stochastic_penalty,
)
from ..models.attention.position import grid_side
from ..models.captioner import build_captioner
from ..models.losses import teacher_forced_loss
from ..predict import caption_features, decode_generator, greedy
from .nonfinite import NonFiniteLossError, nonfinite_message
from .optimizers import build_optimizers, param_groups, replan_one_cycle
from .scst import SelfCritical, training_references


class CaptioningModule(pl.LightningModule):
    """hparams are plain data ({format_version, cfg, vocab}) so checkpoints load with
    torch.load(weights_only=True); the model is rebuilt from them."""

    def __init__(self, cfg: dict, vocab: list[str], format_version: int = FORMAT_VERSION) -> None:
        super().__init__()
        # logger=False: loggers get the flattened config from train(), not the vocabulary.
        self.save_hyperparameters(
            {"format_version": format_version, "cfg": cfg, "vocab": vocab}, logger=False
        )
        self.cfg, self.vocab = cfg, Vocabulary(vocab)
        self.model = build_captioner(cfg, len(vocab))
        self.nan_policy = cfg["trainer"]["nan_policy"]
        self.nan_max_in_row = cfg["trainer"]["nan_max_in_row"]
        self.nonfinite_skipped = 0  # batches skipped for a non-finite loss/gradient (policy skip)
        self._nonfinite_in_row = 0
        self._batch: dict | None = None
        self._loss: torch.Tensor | None = None
        self._outputs: list[dict] = []
        # per decoded batch: (queries, {name: mean}) of what the mode accumulates (pop_statistics)
        self._batch_stats: list[tuple[int, dict[str, float]]] = []
        self._stat_names: tuple[str, ...] = ATTENTION_STATS  # + the mode's own step_statistics
        self.test_predictions: list[dict] = []
        self.metrics: dict[str, dict] = {}  # stage -> the last scores, unrounded
        self.objective = cfg["training"]["objective"]
        self.scst: SelfCritical | None = None  # training=scst: made in on_fit_start (needs the data)
        self._plateau_due = False  # a validation's plateau step not yet taken (on_save_checkpoint)
        self._plateau_due_on_resume: float | None = None  # its score, from the checkpoint resumed

    def on_fit_start(self) -> None:
        if self.objective == "scst" and self.scst is None:
            refs = training_references(self.trainer.datamodule.data)
            self.scst = SelfCritical(self.cfg["training"], self.vocab, refs)

    def _raw_features(self, batch: dict) -> torch.Tensor:
        """(B, N, C) raw encoder features: the store's rows, or with encoder.finetune the
        images through the tuned encoder (its trained stages get gradients only in training,
        once encoder.finetune_after_epochs have passed)."""
        if "images" not in batch:
            return batch["features"]
        after = self.cfg["encoder"]["finetune_after_epochs"]
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.current_epoch >= after):
            return self.model.encode(batch["images"])

    @staticmethod
    def _regions(batch: dict) -> dict:
        """Region features' mask (B, N) and boxes (B, N, 4), as the model's keywords; {} for a grid."""
        return {k: batch[k] for k in ("mask", "boxes") if k in batch}

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if self.scst is not None:
            return self._scst_step(batch)
        tokens = batch["tokens"]  # (B, T)
        targets = tokens[:, 1:]  # (B, T-1)
        p = sample_prob(self.cfg["model"]["scheduled_sampling"], self.current_epoch)
        if p:
            self.log("train/sample_prob", p, batch_size=len(tokens))
        loss, weights = teacher_forced_loss(
            self.model, self._raw_features(batch), tokens, batch["image_index"], self.vocab.pad,
            self.cfg["optim"]["label_smoothing"], p, **self._regions(batch))
        alpha_c = self.cfg["optim"]["alpha_c"]
        if alpha_c:  # doubly stochastic attention (for the Transformer: its last layer, head mean)
            penalty = doubly_stochastic_penalty(weights, targets != self.vocab.pad)
            self.log("train/attn_coverage_penalty", penalty, batch_size=len(tokens))
            loss = loss + alpha_c * penalty
        self.log("train/loss", loss, prog_bar=True, batch_size=len(tokens))
        self._batch, self._loss = batch, loss.detach()  # for the non-finite guard's message
        return loss

    def _scst_step(self, batch: dict) -> torch.Tensor:
        """training=scst: the self-critical loss on this batch's images (its captions unused)."""
        loss, stats = self.scst.loss(self.model, self._raw_features(batch), batch["index"],
                                     self._regions(batch))
        b = len(batch["index"])
        self.log("train/loss", loss, prog_bar=True, batch_size=b)
        self.log("train/reward", stats.pop("reward"), prog_bar=True, batch_size=b)
        self.log_dict({f"train/{k}": v for k, v in stats.items()}, batch_size=b)
        self._batch, self._loss = batch, loss.detach()
        return loss

    def on_before_optimizer_step(self, optimizer) -> None:
        """The NaN/Inf guard, after backward and before clipping and the step: a non-finite loss
        or gradient stops the run (trainer.nan_policy=stop) or is skipped and counted (skip: the
        gradients are dropped, so the optimiser leaves every parameter and its moments as they
        were; the schedule still advances), stopping after nan_max_in_row in a row. The one
        .item() here is a host sync per step, the price of never stepping on a NaN."""
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else self._loss.new_zeros(())
        # NaN/Inf anywhere makes the total norm NaN/Inf: one reduction, one sync.
        if bool(torch.isfinite(self._loss + norm.to(self._loss.device)).item()):
            self._nonfinite_in_row = 0
            return
        self._nonfinite_in_row += 1
        if self.nan_policy == "skip" and self._nonfinite_in_row <= self.nan_max_in_row:
            self.nonfinite_skipped += 1
            for p in self.parameters():
                p.grad = None
            self.log("train/nonfinite_skipped", float(self.nonfinite_skipped))
            return
        raise NonFiniteLossError(self._nonfinite_message())

    def _nonfinite_message(self) -> str:
        ids = self._batch["index"].tolist() if self._batch is not None else []
        dm = getattr(self.trainer, "datamodule", None)
        if dm is not None and getattr(dm, "data", None) is not None:
            ids = [dm.data.records[i].image_id for i in ids]
        return nonfinite_message(float(self._loss), self.trainer.global_step, self.current_epoch, ids,
                                 self.nan_policy, self.nan_max_in_row)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["nonfinite_skipped"] = self.nonfinite_skipped
        # The precision the run trains and tests in (auto: as measured): decoding the checkpoint
        # later in the same precision gives the test stage's own captions (predict.Predictor).
        checkpoint["train_precision"] = str(self.trainer.precision)
        # An epoch-end checkpoint is written after the validation and before the plateau rule
        # steps on its score (Lightning steps plateau schedulers after the checkpoint
        # callbacks, and not at all when it restarts from such a checkpoint): the score goes
        # with it, for the resumed run to take the step (_catch_up_plateau).
        monitor = self.cfg["checkpoint"]["monitor"]
        if self._plateau_due and monitor in self.trainer.callback_metrics:
            checkpoint["plateau_due"] = float(self.trainer.callback_metrics[monitor])

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.nonfinite_skipped = checkpoint.get("nonfinite_skipped", 0)
        self._plateau_due_on_resume = checkpoint.get("plateau_due")

    def lr_scheduler_step(self, scheduler: torch.optim.lr_scheduler.LRScheduler, metric: object) -> None:
        super().lr_scheduler_step(scheduler, metric)
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self._plateau_due = False  # this validation's step is taken

    def _catch_up_plateau(self) -> None:
        """Resumed from an epoch-end checkpoint: the plateau step its validation called for,
        taken now, before the next epoch trains, as the uninterrupted run took it."""
        score, self._plateau_due_on_resume = self._plateau_due_on_resume, None
        if score is None:
            return
        for config in self.trainer.lr_scheduler_configs:
            if config.reduce_on_plateau:
                self.lr_scheduler_step(config.scheduler, score)

    def _decode(self, batch: dict, settings: dict) -> list[dict]:
        """Greedy (beam_size 1) or batched beam search; collects words and attention stats and
        returns this batch's outputs (the media callback shows some of them)."""
        attention = self.model.decoder.attention
        attention.pop_statistics()  # forget training's: report this batch's decoding only
        captions = caption_features(self.model, self.vocab, self._raw_features(batch), settings,
                                    getattr(self, "_generator", None) if settings.get("sample") else None,
                                    self._regions(batch))
        steps = torch.cat([c.steps for c in captions])  # (every decoding step, N)
        # Per image: the sums of its steps' entropy/max/min. Averaging these sums after the
        # outputs of every process are gathered and de-duplicated gives exactly the
        # single-process numbers. One host copy for the batch.
        owner = torch.repeat_interleave(
            torch.arange(len(captions), device=steps.device),
            torch.tensor([len(c.steps) for c in captions], device=steps.device))
        extra = attention.step_statistics(steps)  # {name: (steps,)}, the mode's own
        self._stat_names = (*ATTENTION_STATS, *extra)
        stats = torch.cat([attention_step_stats(steps), *(v.float().unsqueeze(1) for v in extra.values())], 1)
        sums = torch.zeros(len(captions), stats.shape[1], device=steps.device)
        sums = sums.index_add_(0, owner, stats).tolist()
        if popped := attention.pop_statistics():
            self._batch_stats.append((len(steps), popped))
        outputs = []
        # Host copy on purpose: the indices key Python dicts (one copy per batch).
        for i, c, refs, objs, image_id, attn in zip(
            batch["index"].tolist(), captions, batch["refs"], batch["objects"], batch["image_id"],
            sums,
        ):
            out = {"index": i, "hyp": c.words, "refs": refs, "objects": objs, "image_id": image_id,
                   "attn_sums": attn, "attn_steps": len(c.steps)}
            outputs.append({**out, "weights": c.weights})
            if objs and "bbox" in objs[0]:  # ground truth boxes: keep weights for grounding
                # Host copy on purpose: grounding is scored on the CPU, after the gather.
                out["weights"] = c.weights.float().cpu()
            self._outputs.append(out)
        return outputs

    def _gather(self) -> tuple[list[dict], list[tuple[int, float]]]:
        """All processes' outputs, each image once (DDP samplers pad by repeating images), and
        all processes' (queries, {name: mean}) pairs."""
        outputs, self._outputs = self._outputs, []
        batch_stats, self._batch_stats = self._batch_stats, []
        if self.trainer.world_size > 1:
            parts = [None] * self.trainer.world_size
            torch.distributed.all_gather_object(parts, (outputs, batch_stats))
            outputs = [o for part, _ in parts for o in part]
            batch_stats = [g for _, part in parts for g in part]
        return sorted({o["index"]: o for o in outputs}.values(), key=lambda o: o["index"]), batch_stats

    def _score(self, stage: str) -> list[dict]:
        outputs, batch_stats = self._gather()
        hyps = [o["hyp"] for o in outputs]
        refs = [o["refs"] for o in outputs]
        # the one scoring path (evaluate.py scores a checkpoint's captions with it too)
        metrics = caption_metrics(hyps, refs, [o["objects"] for o in outputs], f"{stage}/")
        grounded = [o for o in outputs if "weights" in o]
        data = self.cfg["data"]
        size = data["synthetic"]["image_size"] if "synthetic" in data else None  # built-in data only
        # Grounding reads weights as grid cells; precomputed regions are not (their boxes could
        # be, but the built-in data's features are never regions but in tests).
        if grounded and size and self.cfg["encoder"]["name"] != "precomputed":
            metrics.update(attention_grounding(
                [o["hyp"] for o in grounded], [o["weights"] for o in grounded],
                [o["objects"] for o in grounded], size,
                grid_side(grounded[0]["weights"].shape[-1], "grounding"), f"{stage}/",
            ))
        # Every step of every image once: the same numbers from any number of processes.
        total = sum(o["attn_steps"] for o in outputs)
        for k, key in enumerate(self._stat_names if total else ()):
            metrics[f"{stage}/{key}"] = sum(o["attn_sums"][k] for o in outputs) / total
        # per batch, not per image (images repeated by padding count twice)
        for key in sorted({k for _, popped in batch_stats for k in popped}):
            pairs = [(n, popped[key]) for n, popped in batch_stats if key in popped]
            metrics[f"{stage}/{key}"] = sum(n * v for n, v in pairs) / sum(n for n, _ in pairs)
        self.log_dict(metrics)  # loggers get float32 (Lightning's tensors) ...
        self.metrics[stage] = {k: float(v) for k, v in metrics.items()}  # ... results.json float64
        return outputs

    def validation_step(self, batch: dict, batch_idx: int) -> list[dict]:
        return self._decode(batch, greedy(self.cfg["decode"]))

    def on_validation_epoch_end(self) -> None:
        self._score("val")
        # a plateau schedule steps on this score after the checkpoints are written
        self._plateau_due = (self.trainer.state.fn == "fit" and not self.trainer.sanity_checking
                             and any(c.reduce_on_plateau for c in self.trainer.lr_scheduler_configs))

    def on_test_epoch_start(self) -> None:
        # decode.sample: one seeded stream for the whole pass (the same captions every time)
        self._generator = decode_generator(self.cfg["decode"], self.device)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._decode(batch, self.cfg["decode"])

    def on_test_epoch_end(self) -> None:
        outputs = self._score("test")
        self.test_predictions = [
            {"image_id": o["image_id"], "caption": " ".join(o["hyp"])} for o in outputs
        ]

    def configure_model(self) -> None:
        """model.compile=true: torch.compile every cross-attention module (dynamic shapes: the
        LSTM's batch shrinks step by step). Its cost shows as results.json's first_step_s."""
        if not self.cfg["model"]["compile"] or getattr(self, "_compiled", False):
            return
        for m in cross_attention_modules(self.model.decoder):
            m.forward = torch.compile(m.forward, dynamic=True)
        self._compiled = True

    def configure_optimizers(self):
        return build_optimizers(
            self.cfg["optim"], param_groups(self.model, self.cfg["encoder"]),
            self.trainer.world_size, lambda: self.trainer.estimated_stepping_batches,
            self.cfg["checkpoint"]["monitor"])

    def on_train_start(self) -> None:
        """A resume from an epoch end: the plateau step that was due (_catch_up_plateau). A
        resume with a larger trainer.max_epochs: the restored one-cycle schedule still ends at
        the old length (stepping past it would fail); re-plan it over the new length."""
        self._catch_up_plateau()
        total = int(self.trainer.estimated_stepping_batches)
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if isinstance(scheduler, torch.optim.lr_scheduler.OneCycleLR) and scheduler.total_steps != total:
                replan_one_cycle(scheduler, total)


def sample_prob(schedule: dict, epoch: int) -> float:
    """model.scheduled_sampling at an epoch: 0 before start_epoch, then rising linearly to
    max_prob over ramp_epochs (epoch start_epoch already gets max_prob / ramp_epochs)."""
    top = float(schedule["max_prob"])
    if top <= 0:
        return 0.0
    done = epoch - schedule["start_epoch"] + 1
    return top * min(1.0, max(0.0, done / max(1, schedule["ramp_epochs"])))
