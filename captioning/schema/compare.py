"""scripts/compare.py's section of the config (`compare`, set by conf/experiment/): the grid, its
sweep, its report and where its cells run."""

from dataclasses import dataclass
from typing import Any

from .fields import REQUIRED, at_least, one_of, setting


@dataclass
class Limit:
    """compare.dim_limits.<dims> / compare.decoder_limits.<decoder>: only these cells (null: all)."""

    attentions: list[str] | None = None
    seeds: list[int] | None = None
    dims: list[str] | None = None


@dataclass
class GalleryCells:
    """compare.gallery: which finished cells a report shows side by side (captioning/gallery)."""

    decoder: str = REQUIRED
    dims: str = REQUIRED
    seed: int = REQUIRED
    attentions: list[str] = REQUIRED
    device: str = "auto"            # where the checkpoints re-decode the split for their attention


# compare.executor: local trains here; slurm submits a job per cell; debug is submitit's
# in-process executor (compare/executor.py).
EXECUTORS = ("local", "slurm", "debug")


@dataclass
class Compare:
    """scripts/compare.py's grid and report (conf/experiment/cross_modal.yaml explains each)."""

    name: str = REQUIRED
    root: str = "results"
    attentions: list[str] = setting([])
    decoders: list[str] = setting(["lstm"])
    seeds: Any = setting([0])       # Any: the sweep's lists arrive as ${compare.sweep.*} interpolations
    blind: bool = True
    dims: Any = setting([])
    dim_settings: dict[str, Any] = setting({})
    decoder_settings: dict[str, Any] = setting({})
    lrs: Any = None                 # peak rates to sweep (a list), or null: the run's own
    bracket: bool = True            # a local sweep trains only the rates a choice needs (sweep.choose)
    rates: dict[str, Any] = setting({})
    sweep: Any = None
    dim_limits: dict[str, Limit] = setting({})
    decoder_limits: dict[str, Limit] = setting({})
    report: str = setting("standard", one_of("standard", "convergence"))
    # the convergence report's difference of differences: [[a, b], ...] = (gap in dims a) − (gap in b)
    interactions: list[Any] = setting([])
    same_features: dict[str, str] = setting({})  # dims -> dims on the same features (its gaps borrow modes)
    # the convergence report's differences across modes and conditions: [[dims, a, other dims, b],
    # ...] = (a in dims) − (b in other dims), paired by seed (the learned-projection control)
    controls: list[Any] = setting([])
    undertrained_margin: float = 0.10
    verify: int = setting(0, at_least(0))
    benchmark: bool = True
    benchmark_args: dict[str, Any] = setting({})
    throughput_from: str | None = None
    # a folder of maint/encoder_candidates.py JSON files: the report's table of the encoders
    # considered and the one-run check that chose this grid's (learned-feature grids)
    encoder_check: str | None = None
    # what the grid's features are, said plainly: the paragraph its convergence report opens with
    features: str | None = None
    bootstrap_samples: int = setting(1000, at_least(1))
    train: bool = True
    # print each cell's state (finished, running, interrupted, waiting) from compare.root and stop
    status: bool = False
    sections: list[str] = setting([])
    gallery: Any = None             # null, or GalleryCells (Any: OmegaConf cannot merge a command-line
                                    # dict into a null structured field; schema.choose types it)
    executor: str = setting("local", one_of(*EXECUTORS))
    # local: cells at once on this machine, each its own process (compare/workers.py): on its
    # own GPU, or on cores // workers threads where trainer.num_threads leaves them free
    workers: int = setting(1, at_least(1))
    slurm: dict[str, Any] = setting({})
