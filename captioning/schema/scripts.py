"""The other entry points' own configs: scripts/evaluate.py, caption.py, gallery.py
(prepare_data.py composes the training config: schema.run.Train). Their yamls hold Hydra's
settings only; every value is here. Hydra checks the types when it composes them; these
schemas state no ranges (decode settings that contradict each other: predict.decode_settings)."""

from dataclasses import dataclass
from typing import Any

from .fields import REQUIRED, setting


@dataclass
class DecodeOverride:
    """Decoding at evaluation: null = the checkpoint's own setting (schema.run.Decode)."""

    beam_size: int | None = None
    alpha: float | None = None
    block_ngram: int | None = None
    max_len: int | None = None
    min_len: int | None = None
    sample: bool | None = None      # true: sampling (temperature, top_k, top_p, seed) instead of search
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    n_best: int | None = None       # > 1: beam search's n best per image


@dataclass
class Evaluate:
    """scripts/evaluate.py checkpoint=PATH split=test decode.beam_size=5"""

    checkpoint: Any = REQUIRED      # a .ckpt, or a list of them: an ensemble ('[a.ckpt,b.ckpt]')
    device: str = "auto"            # auto (the GPU when there is one, as training) | cpu | cuda | cuda:N
    split: str = "test"
    decode: DecodeOverride = setting(DecodeOverride())
    tokenizer: str = "simple"       # or ptb: coco-caption's tokeniser (needs Java)
    meteor: bool = True             # METEOR runs when Java is present
    # images decoded at once; null: the run's data.eval_batch_size, its test stage's batches
    batch_size: int | None = None
    data: dict[str, Any] = setting({})  # overrides of the checkpoint's data config: +data.<key>=value
    output_dir: str | None = None   # default: <run>/eval/<split>_beam<k>_alpha<a>


@dataclass
class Caption:
    """scripts/caption.py checkpoint=PATH image=FILE_OR_DIR"""

    checkpoint: Any = REQUIRED      # a .ckpt, or a list of them: an ensemble
    device: str = "auto"
    image: str = REQUIRED           # an image file or a directory of them
    attention_map: str | None = None  # PNG path; with a directory, one figure per image: <stem>_<image>.png
    attention_scale: str = "shared"   # shared: one colour scale for all word panels | panel: each its own
    decode: DecodeOverride = setting(DecodeOverride())


@dataclass
class Gallery:
    """scripts/gallery.py runs=[<run dir>,<run dir>] out=gallery"""

    runs: Any = REQUIRED            # run dirs or comparison cells (attention needs their checkpoints/)
    names: list[str] | None = None  # one label per run (default: the folder names)
    checkpoints: list[Any] | None = None  # per run, a checkpoint for its attention (null entries: its own)
    out: str = "gallery"            # the folder to write (index.html, data.js, images/, ...)
    split: str = "test"
    device: str = "auto"            # where the checkpoints re-decode the split for their attention
    page_size: int = 50             # images a page
