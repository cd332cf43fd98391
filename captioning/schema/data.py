"""`data=<name>`: the built-in generated dataset, or a dataset on disk in Karpathy's format (or
coco | csv | jsonl, data/README.md: "Formats"), which flickr8k, flickr30k and coco preset."""

from dataclasses import dataclass
from typing import Any

from .fields import REQUIRED, Rule, at_least, one_of, setting

# Larger images are skipped and listed (data/images.py); PIL's own default (~9459 x 9459
# pixels): far above any captioning photo, far below a decompression bomb.
MAX_IMAGE_PIXELS = 89_478_485

# The dataset file formats data/formats.py reads (data/README.md: "Formats").
DATA_FORMATS = ("karpathy", "coco", "csv", "jsonl")

# data.num_workers: a count, or auto (on a GPU min(4, CPUs per process - 1), on a CPU 0).
WORKERS = Rule(lambda v: v == "auto" or isinstance(v, int) and v >= 0, "an integer >= 0 or auto")


@dataclass
class Batches:
    """What every dataset has: vocabulary, caption length, batches, the blind control."""

    name: str = REQUIRED
    cache_dir: str = "${paths.data_dir}/cache"  # features, keyed by dataset + encoder + weights + size
    min_word_freq: int = setting(1, at_least(1))
    max_caption_len: int = setting(30, at_least(1))
    captions_per_image: int | None = setting(None, at_least(1))  # training captions per image: null = all
    batch_size: int = setting(24, at_least(1))  # training images per batch, each with all its captions
    eval_batch_size: int = setting(200, at_least(1))
    num_workers: Any = setting(0, WORKERS)  # loader workers reading the store
    blind: bool = False             # true zeroes the image features: the control that shows the image matters
    max_image_pixels: int = setting(MAX_IMAGE_PIXELS, at_least(1))


@dataclass
class SyntheticImages:
    """The generated images: shapes of a few colours and sizes, captions from a grammar."""

    num_train: int = setting(3000, at_least(1))
    num_val: int = setting(300, at_least(1))
    num_test: int = setting(600, at_least(1))
    image_size: int = setting(128, at_least(48))
    max_objects: int = setting(3, at_least(1))
    noise_std: float = setting(8.0, at_least(0))
    seed: int = 0


@dataclass
class Synthetic(Batches):
    """The built-in dataset: generated on first use into ${root}/synthetic_<hash>/, then reused."""

    name: str = "synthetic"
    root: str = "${paths.data_dir}/synthetic"
    synthetic: SyntheticImages = setting(SyntheticImages())


@dataclass
class Karpathy(Batches):
    """A dataset in Karpathy's JSON format (dataset_<name>.json: images with their split and
    sentences), or your own in another format (data/README.md)."""

    name: str = "karpathy"
    json_path: str = REQUIRED
    image_root: str = REQUIRED
    format: str = setting("karpathy", one_of(*DATA_FORMATS))
    split_file: str | None = None   # format=coco: a Karpathy JSON giving each image's split ...
    split: str | None = None        # ... or one split for the whole file
    min_word_freq: int = setting(5, at_least(1))
    num_workers: Any = setting("auto", WORKERS)


def data_schema(cfg: dict) -> type:
    """data=<name>: the built-in dataset has a `synthetic` section, every other one is a file."""
    return Synthetic if "synthetic" in cfg else Karpathy
