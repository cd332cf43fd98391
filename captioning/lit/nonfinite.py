"""What a run says when training meets a NaN/Inf loss or gradient (the guard itself is
CaptioningModule.on_before_optimizer_step): where it happened, on which images, the likely
causes and the way on."""

from __future__ import annotations


class NonFiniteLossError(RuntimeError):
    """Training met a NaN/Inf loss or gradient; the message names the step, images and causes."""


def nonfinite_message(loss: float, step: int, epoch: int, image_ids: list, policy: str,
                      max_in_row: int) -> str:
    """The error's one message: the step and epoch, the batch's image ids, what to try."""
    what = (f"{max_in_row + 1} batches in a row (trainer.nan_max_in_row)"
            if policy == "skip" else "this batch")
    return (
        f"non-finite loss or gradient (loss {loss:g}) at step {step}, epoch {epoch}: {what}. "
        f"Image ids in the batch: {image_ids}. Likely causes: a learning rate too high "
        "(optim.optimizer.lr), a float16 overflow (use trainer.precision=bf16-mixed or 32-true), "
        "NaN/Inf in these images' cached features (delete the feature store under data.cache_dir "
        "to re-extract), or a corrupt image. The last good checkpoint is untouched: continue "
        "with resume=<run dir>; trainer.nan_policy=skip skips such batches instead.")
