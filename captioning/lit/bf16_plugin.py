"""bf16-mixed training with a fused optimizer and gradient clipping (conf/trainer/gpu.yaml, and
trainer.precision=bf16-mixed or auto's choice on a CPU).

Two departures from Lightning's MixedPrecision:
- Clipping. It refuses to clip gradients for an optimizer that unscales them itself (fused AdamW
  sets `_step_supports_amp_scaling`): right for fp16, whose GradScaler hands the optimizer scaled
  gradients, but bf16 has no scaler, so the gradients are never scaled and clipping them is
  exactly fp32's. This plugin clips as the base Precision does for bf16.
- The cast cache. It runs autocast with `cache_enabled=False`, so every use of a weight casts it
  to bf16 again: the LSTM decoder uses its cell, attention and gate weights at each of its T
  steps, and each cast then has its own backward node. autocast's cache casts each weight once
  per forward (the cache is emptied when the context exits, after every training step), as
  torch.autocast does by default. The price: a weight's gradient from its T uses is summed in
  bf16 before it becomes fp32 (without the cache each use's gradient is cast and summed in
  fp32). The cache's old hazard, a cast made under no_grad reused in a graph (scheduled
  sampling's first pass runs under no_grad), does not arise in the torch this project pins: such
  a cast is not cached (tests/test_precision.py compares the gradients with the cache-less run's).
  Whether bf16-mixed training is good enough is measured: docs/benchmarks.md."""

from __future__ import annotations

import torch
from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.utilities import GradClipAlgorithmType


class BF16Mixed(MixedPrecision):
    def __init__(self, device: str) -> None:
        super().__init__("bf16-mixed", device)

    def autocast_context_manager(self) -> torch.autocast:
        return torch.autocast(self.device, dtype=torch.bfloat16)  # the cast cache on (see above)

    def clip_gradients(self, optimizer, clip_val: float = 0.0,
                       gradient_clip_algorithm: GradClipAlgorithmType = GradClipAlgorithmType.NORM) -> None:
        Precision.clip_gradients(self, optimizer, clip_val, gradient_clip_algorithm)  # nothing to unscale
