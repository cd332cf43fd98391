"""bf16-mixed training with a fused optimizer and gradient clipping (conf/trainer/gpu.yaml, and
trainer.precision=bf16-mixed on a CPU).

Lightning's MixedPrecision refuses to clip gradients for an optimizer that unscales them itself
(fused AdamW sets `_step_supports_amp_scaling`): right for fp16, whose GradScaler hands the
optimizer scaled gradients, but bf16 has no scaler, so the gradients are never scaled and
clipping them is exactly fp32's. This plugin clips as the base Precision does for bf16."""

from __future__ import annotations

from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.utilities import GradClipAlgorithmType


class BF16Mixed(MixedPrecision):
    def __init__(self, device: str) -> None:
        super().__init__("bf16-mixed", device)

    def clip_gradients(self, optimizer, clip_val: float = 0.0,
                       gradient_clip_algorithm: GradClipAlgorithmType = GradClipAlgorithmType.NORM) -> None:
        Precision.clip_gradients(self, optimizer, clip_val, gradient_clip_algorithm)  # nothing to unscale
