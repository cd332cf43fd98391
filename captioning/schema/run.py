"""The run's own sections (train.yaml): trainer, objective, schedule, checkpoints, early stopping,
test-stage decoding, logged media, optimiser, paths; and the root schema of `python train.py`
(its `compare` section, scripts/compare.py's: schema/compare.py)."""

from dataclasses import dataclass
from typing import Any, Dict  # noqa: UP035  (OmegaConf needs typing.Dict as a base class)

from .compare import Compare
from .fields import REQUIRED, Rule, above, at_least, between, one_of, setting
from .model import Model

# The layouts scripts/extract_features.py writes (encoder=precomputed reads each).
EXPORT_FORMATS = ("npy_dir", "npz_dir", "npz")


@dataclass
class Extract:
    """scripts/extract_features.py: the dataset's features from the configured encoder (its
    feature store, extracted once) written in a layout encoder=precomputed reads."""

    out: str = REQUIRED             # a folder (npy_dir, npz_dir) or a .npz file (npz)
    format: str = setting("npy_dir", one_of(*EXPORT_FORMATS))
    splits: list[str] = setting([])  # e.g. [train, val]; empty: every split


@dataclass
class Trainer(Dict[str, Any]):  # noqa: UP006
    """pytorch_lightning.Trainer's arguments and four of ours, popped before the Trainer is
    built. Any other Trainer argument may be set too (a preset's, or +trainer.<arg>=...): the
    Dict base lets the node hold it, and check_config checks it against Trainer's signature."""

    _target_: str = "pytorch_lightning.Trainer"
    default_root_dir: str = "${paths.output_dir}"
    accelerator: str = "auto"
    strategy: str = "auto"          # ddp for several processes (gloo on CPU)
    devices: Any = 1
    # auto: bf16-mixed on a GPU with bf16; on a CPU whichever of 32-true and bf16-mixed runs this
    # model's training step faster here, measured once per machine and model (lit/auto_precision.py,
    # docs/benchmarks.md); or any Lightning precision (lit/auto_precision.py: TRAIN_PRECISIONS, from
    # Lightning's own list). CAPTIONING_TRAIN_PRECISION sets the default.
    precision: Any = "${oc.env:CAPTIONING_TRAIN_PRECISION,auto}"
    max_epochs: int = setting(7, at_least(1), note="the one-cycle schedule needs a finite length; "
                                                   "-1 = endless is not offered")
    gradient_clip_val: float | None = 5.0
    log_every_n_steps: int = setting(20, at_least(1))
    num_sanity_val_steps: int = 0
    enable_model_summary: bool = False
    deterministic: Any = False
    enable_progress_bar: bool = True
    # An int (batches) or a fraction: shorter epochs for quick checks. An int also cuts the split
    # to the images its batches reach (its first int x batch size), so only those are extracted:
    # each epoch draws its batches from those; the vocabulary is still the whole split's
    # (lit/datamodule.py: images_reached).
    limit_train_batches: Any = None
    limit_val_batches: Any = None
    limit_test_batches: Any = None
    fast_dev_run: Any = False        # true or N: N batches of each stage, no checkpoints, no logging
    # Ours: a NaN/Inf loss or gradient stops the run with a message (stop), or is skipped and
    # counted in results.json (skip), stopping after nan_max_in_row in a row.
    nan_policy: str = setting("stop", one_of("stop", "skip"))
    nan_max_in_row: int = setting(5, at_least(0))
    matmul_precision: str = setting("highest", one_of("highest", "high", "medium"))  # high = TF32
    # CPU threads of this process's torch ops; null: torch's default (every core). Results
    # reproduce to the last digit per CPU kind *and* thread count (results.json records both).
    num_threads: int | None = setting(None, at_least(1))


# Ours, under `trainer:` (not Trainer arguments): lit/training.py pops them.
OWN_TRAINER_KEYS = ("nan_policy", "nan_max_in_row", "matmul_precision", "num_threads")


@dataclass
class TrainerDdp(Trainer):
    """trainer=ddp: one process per device, on one or more nodes."""

    num_nodes: int = setting(1, at_least(1))


@dataclass
class CrossEntropy:
    """Teacher forcing on the reference captions: the default, and stage one of every recipe."""

    objective: str = setting("ce", one_of("ce", "scst"), note="ce (cross-entropy) or scst (self-critical)")


@dataclass
class SelfCritical:
    """training=scst: K sampled captions per image, each rewarded by its CIDEr-D minus a baseline."""

    objective: str = setting("scst", one_of("ce", "scst"))
    samples: int = setting(5, at_least(2), note="the mean baseline needs the other samples")
    # mean: the mean reward of the image's other K-1 samples (Luo 2020's "new self-critical");
    # greedy: the reward of the image's greedy caption (Rennie et al. 2017; one more decode).
    baseline: str = setting("mean", one_of("mean", "greedy"))
    max_len: int = setting("${decode.max_len}", at_least(1))


def training_schema(cfg: dict) -> type:
    return SelfCritical if cfg.get("objective") == "scst" else CrossEntropy


# Schedules (`schedule=<name>`, @package optim.scheduler): each its target's keyword arguments.
@dataclass
class OneCycle:
    """Warm-up over pct_start of the steps to max_lr, then annealing to ~0."""

    _target_: str = "torch.optim.lr_scheduler.OneCycleLR"
    _partial_: bool = True
    max_lr: float = "${optim.optimizer.lr}"
    pct_start: float = setting(0.15, between(0, 1, low_open=True, high_open=True))


@dataclass
class Plateau:
    """The rate x factor when checkpoint.monitor has not improved for `patience` validations."""

    _target_: str = "torch.optim.lr_scheduler.ReduceLROnPlateau"
    _partial_: bool = True
    mode: str = "${checkpoint.mode}"
    factor: float = setting(0.5, between(0, 1, low_open=True, high_open=True))
    patience: int = setting(1, at_least(0))


@dataclass
class WarmupCosine:
    """Linear warm-up over warmup_pct of the steps, then cosine decay to min_lr_ratio x lr."""

    _target_: str = "captioning.lit.schedules.warmup_cosine"
    _partial_: bool = True
    warmup_pct: float = setting(0.05, between(0, 1, high_open=True))
    min_lr_ratio: float = setting(0.0, between(0, 1))


@dataclass
class WarmupPlateau(Plateau):
    """Linear warm-up over warmup_steps optimiser steps, then Plateau's rule (lit/schedules.py)."""

    _target_: str = "captioning.lit.schedules.WarmupPlateau"
    warmup_steps: int = setting(125, at_least(0))  # one epoch of the built-in data (3000 images / 24)


SCHEDULES = {s._target_: s for s in (OneCycle, Plateau, WarmupCosine, WarmupPlateau)}


@dataclass
class Checkpoint:
    """Full-state checkpoints in <run dir>/checkpoints/ (docs/checkpoints.md)."""

    every_n_steps: int = setting(500, at_least(0), note="0: at epoch ends only")  # and every epoch end
    monitor: str = "val/bleu4"      # best.ckpt: the best value of this metric; the test stage uses it
    mode: str = setting("max", one_of("min", "max"))
    # Weights-only epoch<N>.ckpt at the end of these epochs (1-based), each tested after training
    # like best.ckpt (results.json at_epoch, predictions_epoch<N>.json): a fixed budget's model.
    snapshot_epochs: list[int] = setting([], Rule(lambda v: all(e >= 1 for e in v), ""),
                                         must="a list of epochs (integers >= 1)")


@dataclass
class EarlyStopping:
    """Stop when checkpoint.monitor has not improved by min_delta for `patience` validations
    (Lightning's EarlyStopping); null = train all trainer.max_epochs."""

    patience: int | None = setting(None, at_least(0))
    min_delta: float = setting(0.0, at_least(0))
    # The monitor averaged over the last N validations before it is compared (1: the raw score).
    # A noisy validation score (greedy BLEU-4 on a few hundred images) then neither stops a run
    # whose curve still rises nor prolongs one that has flattened.
    smoothing: int = setting(1, at_least(1))


@dataclass
class Decode:
    """Test-stage decoding (validation is always greedy: it only ranks checkpoints). Beam 5 with
    alpha 1.0 was chosen on the built-in dataset's validation split (docs/results.md)."""

    beam_size: int = setting(5, at_least(1), note="1 = greedy")  # >1 = batched beam search
    max_len: int = setting(30, at_least(1))
    alpha: float = setting(1.0, at_least(0), note="0 ranks by log-probability")  # ((5 + len) / 6) ** alpha
    block_ngram: int = setting(0, at_least(0), note="0 = off")  # forbid repeating any n-gram
    min_len: int = setting(0, at_least(0), note="0 = off")      # no <eos> before this many words
    # Sampling instead of search: softmax(logits / temperature) cut to the top_k tokens (0: all)
    # and to the smallest set holding top_p of the probability (1.0: all); seeded.
    sample: bool = False
    temperature: float = setting(1.0, above(0), note="greedy is decode.beam_size=1")
    top_k: int = setting(0, at_least(0), note="0 = no cut")
    top_p: float = setting(1.0, between(0, 1, low_open=True), note="1.0 = no cut")
    seed: int = 0
    n_best: int = setting(1, at_least(1))  # > 1: beam search's n best per image (<= beam_size)


@dataclass
class Media:
    """What wandb and TensorBoard show beyond scalars (skipped in the sanity check)."""

    num_samples: int = setting(8, at_least(0))    # validation images in the per-epoch table
    num_attention: int = setting(2, at_least(0))  # of those, how many get an attention figure
    every_n_epochs: int = setting(1, at_least(1))
    attention_scale: str = "shared"  # shared: one colour scale | panel: each its own (visualize.SCALES)


@dataclass
class Optimizer:
    """The optimiser's class and keyword arguments (another class: optim.optimizer._target_=...)."""

    _target_: str = "torch.optim.AdamW"
    _partial_: bool = True
    lr: float = setting(3.0e-3, above(0))
    weight_decay: float = setting(0.01, at_least(0))
    fused: bool = True              # one fused kernel for all parameters (CPU and GPU)


@dataclass
class Optim:
    optimizer: Optimizer = setting(Optimizer())
    scheduler: Any = None           # from the `schedule` group (conf/schedule/)
    label_smoothing: float = setting(0.1, between(0, 1, high_open=True))
    # Doubly stochastic attention (Show-Attend-Tell): + alpha_c * sum_i (1 - sum_t attention_ti)^2
    alpha_c: float = setting(0.0, at_least(0), note="0 = off")
    # With several processes the global batch grows with the process count W: none keeps lr;
    # sqrt multiplies it by sqrt(W) (our rule for AdamW); linear by W.
    lr_scaling: str = setting("sqrt", Rule(lambda v: v in ("none", "sqrt", "linear"), "none, sqrt or linear"))


@dataclass
class Paths:
    data_dir: str = "data"          # relative to where you run train.py
    log_dir: str = "outputs"
    output_dir: str = "${hydra:runtime.output_dir}"


@dataclass
class Train:
    """`python train.py`: conf/train.yaml over this; every group below has its own schema."""

    seed: int = 0                   # seeds python, numpy and torch, and the training order
    task_name: str = "train"
    # What a run is called in wandb and TensorBoard (a multirun job adds "-<sweep id>-<job number>").
    run_name: str = "${attention.name}-${decoder.name}-${encoder.name}-${data.name}-s${seed}"
    # Continue a killed run from its newest intact checkpoint: a run dir, or auto (the newest run
    # with this config's hash). The config must equal the run's; only a larger max_epochs.
    resume: str | None = None
    # A new run that starts from a checkpoint's weights (fine-tuning, SCST); the file's content
    # fingerprint is part of the config hash.
    init_from: str | None = None
    checkpoint: Checkpoint = setting(Checkpoint())
    early_stopping: EarlyStopping = setting(EarlyStopping())
    decode: Decode = setting(Decode())
    model: Model = setting(Model())
    media: Media = setting(Media())
    optim: Optim = setting(Optim())
    paths: Paths = setting(Paths())
    # The config groups (conf/<group>/): each option names its own schema.
    encoder: Any = REQUIRED
    data: Any = REQUIRED
    attention: Any = REQUIRED
    decoder: Any = REQUIRED
    trainer: Any = REQUIRED
    training: Any = REQUIRED
    logger: Any = None              # extension point: {name: {_target_: a Lightning logger, ...}}
    callbacks: Any = None           # extension point: {name: {_target_: a Lightning callback, ...}}
    compare: Compare | None = None  # scripts/compare.py's experiments set it
    report: str = "data_report.json"  # scripts/prepare_data.py: where its report goes
    extract: Extract | None = None    # scripts/extract_features.py: what it writes
