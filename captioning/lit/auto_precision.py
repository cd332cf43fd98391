"""`trainer.precision: auto`: the training precision this run's model trains faster in here.

On a GPU, bf16-mixed where the GPU has bf16 (its bf16 units are the fast ones), else 32-true. On
a CPU, a measurement: training steps of a copy of this run's model on batches of its own data
(forward, loss, backward, the fused optimiser), fp32 against bf16 autocast as lit/bf16_plugin.py runs
it, once per machine and model/shape signature (models/precision_choice.py caches it). Whether a CPU's
faster bf16 matmuls make the whole step faster depends on the model and the CPU: the LSTM's many
small per-step ops can lose in bf16 what its matmuls gain (docs/benchmarks.md: "`make
train` in each precision"). Several CPU processes (DDP) and a fine-tuned encoder get 32-true unmeasured. Any
other value of `trainer.precision` is used as given. Whether bf16-mixed trains as well as fp32
is not measured per run: docs/benchmarks.md compares `make train` in both.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import random
from collections.abc import Callable
from typing import get_args

import numpy as np
import pytorch_lightning as pl
import torch
from lightning_fabric.connector import _PRECISION_INPUT_INT, _PRECISION_INPUT_STR, _PRECISION_INPUT_STR_ALIAS

from ..models.losses import teacher_forced_loss
from ..models.precision_choice import training_choice
from ..provenance import fingerprint
from .bf16_plugin import BF16Mixed

log = logging.getLogger(__name__)

PRECISIONS = {torch.float32: "32-true", torch.bfloat16: "bf16-mixed"}
STEPS = 6  # batches: each precision steps through them untimed, then timed (alternating)
# What trainer.precision may be: auto, or what Lightning's Trainer takes.
TRAIN_PRECISIONS = tuple(dict.fromkeys(["auto", *get_args(_PRECISION_INPUT_STR), *(
    str(v) for v in (*get_args(_PRECISION_INPUT_STR_ALIAS), *get_args(_PRECISION_INPUT_INT)))]))


def accelerator_type(trainer_cfg: dict) -> str:
    """Where the Trainer will run: "cpu", or the accelerator's device type (accelerator=auto
    picks one when there is one)."""
    if str(trainer_cfg["accelerator"]) == "cpu" or not torch.accelerator.is_available():
        return "cpu"
    return torch.accelerator.current_accelerator().type


def _has_bf16(device_type: str) -> bool:
    check = getattr(getattr(torch, device_type, None), "is_bf16_supported", None)
    return bool(check and check())


def resolve_precision(trainer_cfg: dict, cfg: dict, model: torch.nn.Module,
                      batches: Callable[[int], list[dict]], pad: int) -> tuple[str, str]:
    """-> (Lightning precision, why): `trainer.precision` as given, or for `auto` the measured
    choice. `batches(k)` gives k training batches of this run (collated; called only to
    measure), `model` is the captioning model (copied here: the run's own weights, optimiser
    and random streams stay untouched), `pad` the vocabulary's padding id."""
    asked = str(trainer_cfg["precision"])
    if asked != "auto":
        return asked, "trainer.precision"
    device = accelerator_type(trainer_cfg)
    if device != "cpu":  # an accelerator's bf16 units are faster than its fp32 ones
        if _has_bf16(device):
            return "bf16-mixed", f"auto: {device} with bf16"
        return "32-true", f"auto: {device} without bf16"
    if _processes(trainer_cfg) > 1:  # each would time alone, with the others running, and could differ
        return "32-true", "auto: fp32 for several CPU processes (not measured)"
    if cfg["encoder"].get("finetune"):  # its images and encoder follow encoder.precision
        return "32-true", "auto: fp32 when fine-tuning the encoder on a CPU (not measured)"
    with _random_streams_kept():  # the batches and dropout in the measured steps draw from them
        # Distinct batches, the same ones for both precisions: the LSTM's per-step batch shrinks
        # with each batch's caption lengths, so the kernels of many shapes are met. Each
        # precision first runs through them all untimed (its kernels made once, as in a long
        # run), then is timed on the same batches again.
        measured = batches(STEPS)
        result = training_choice(_signature(cfg, model, measured[0]), _step(model, cfg, measured, pad),
                                 repeats=STEPS, warmup=STEPS)
    bf16 = "n/a" if result["bf16_s"] is None else f"{result['bf16_s']:.3f} s"
    why = (f"auto: measured a training step here, fp32 {result['fp32_s']:.3f} s, bf16 {bf16} "
           f"-> {result['choice']}")
    return PRECISIONS[torch.bfloat16 if result["choice"] == "bf16" else torch.float32], why


def trainer_arg(trainer_cfg: dict, name: str):
    """A Trainer argument the schema does not list (num_nodes, ...): the config's value, else
    Lightning's own default, read from its signature."""
    if name in trainer_cfg:
        return trainer_cfg[name]
    return inspect.signature(pl.Trainer.__init__).parameters[name].default


def _processes(trainer_cfg: dict) -> int:
    devices, nodes = trainer_cfg["devices"], trainer_arg(trainer_cfg, "num_nodes")
    if not isinstance(devices, int) or not isinstance(nodes, int):  # "auto", a list: not one
        return 2
    return devices * nodes


def _signature(cfg: dict, model: torch.nn.Module, batch: dict) -> str:
    """What decides a step's cost: the model (its settings and parameter shapes: vocabulary,
    widths) and the batch's shapes."""
    settings = {k: cfg.get(k) for k in ("decoder", "attention", "model")}
    shapes = {"params": [list(p.shape) for p in model.parameters()],
              "features": list(batch["features"].shape), "tokens": list(batch["tokens"].shape)}
    name = f"{cfg['decoder'].get('name')}/{cfg['attention'].get('name')}"
    return f"{name} {fingerprint({'settings': settings, 'shapes': shapes}, 12)}"


def _step(model: torch.nn.Module, cfg: dict, batches: list[dict], pad: int):
    """run(dtype): one training step of a copy of `model` on the next of `batches` for that
    dtype (each precision goes through the same batches in the same order), autocast to dtype."""
    twin = copy.deepcopy(model).train()
    turn = {torch.float32: 0, torch.bfloat16: 0}
    optimizer = torch.optim.AdamW(twin.parameters(), lr=1e-6, fused=True)  # fused as configured
    smoothing = cfg["optim"]["label_smoothing"]

    def run(dtype: torch.dtype) -> None:
        batch = batches[turn[dtype] % len(batches)]
        turn[dtype] += 1
        bf16 = dtype == torch.bfloat16  # autocast as training runs it (lit/bf16_plugin.py)
        with BF16Mixed("cpu").autocast_context_manager() if bf16 else contextlib.nullcontext():
            loss, _ = teacher_forced_loss(twin, batch["features"], batch["tokens"],
                                          batch["image_index"], pad, smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return run


@contextlib.contextmanager
def _random_streams_kept():
    state = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(state[0])
        random.setstate(state[1])
        np.random.set_state(state[2])
