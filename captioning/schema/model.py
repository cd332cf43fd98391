"""The model's settings: `decoder=<name>` (each decoder's constructor keywords, derived from it),
`encoder=<name>` (a ResNet extracted here, or features you bring) and the `model:` section."""

from dataclasses import dataclass

from ..models.decoders import DECODERS
from .fields import REQUIRED, Rule, above, at_least, between, from_signature, one_of, setting

# decoder=<name>: the decoder's constructor keywords (models/decoders/), derived from them; the
# vocabulary, feature width and attention are the run's, not settings.
# global_first is the encoder's to say (models/encoder_specs.py: global_first), not a decoder setting
DECODER = {name: from_signature(name, DECODERS[name], skip=("global_first",)) for name in DECODERS}


@dataclass
class Normalised:
    """How raw features are normalised before the decoder (fitted on the training split)."""

    normalize: str = "pca_whiten"   # or standard (models/normalizer.py: NORMALIZE_METHODS)
    pca_dim: int | None = None      # null keeps the full width (2048 for ResNet-50); 512 = matched width
    whiten_eps: float = setting(0.1, at_least(0))  # damping, relative to the mean eigenvalue


@dataclass
class ResNet(Normalised):
    """A torchvision ResNet (models/encoder.py); features computed once and cached on disk."""

    name: str = "resnet50"
    pretrained: bool = False        # true: ImageNet weights from the hub cache or weights_path (no downloads)
    weights_path: str | None = None
    verify_weights: bool = True     # the file must be one torchvision publishes (sha256); false for your own
    # The one file this config's runs read (its hex sha256), checked before any work: a grid
    # worked on several machines pins its encoder file here. null: any file.
    weights_sha256: str | None = None
    init_seed: int = 0              # random init is seeded, so cached features and later captioning agree
    image_size: int = setting(128, at_least(32), note="the ResNet's stride")  # 128 -> 4x4 grid, 224 -> 7x7
    batch_size: int = setting(64, at_least(1))
    num_workers: int = setting(1, at_least(0))
    device: str = "auto"            # feature extraction: auto = the GPU when there is one
    # The frozen encoder's precision (extraction, a fine-tuned encoder's frozen part, caption.py):
    # auto = the faster of fp32 and bf16 measured on this machine (GPUs: bf16); fp32 | bf16 force
    # it (models/encoder.py: PRECISIONS). CAPTIONING_PRECISION sets the default.
    precision: str = "${oc.env:CAPTIONING_PRECISION,auto}"
    # Fine-tuning (docs/training.md, "Fine-tuning the encoder"): the last stages train end to end;
    # images are read and augmented per batch; checkpoints carry the tuned stages.
    finetune: bool = False
    # counted from the end: 1 = a ResNet's layer4, ConvNeXt's/Swin's stage4, ViT's last block;
    # the most: all of them and the stem (ResNet, ConvNeXt, Swin: 5; ViT-B/16: 13)
    finetune_stages: int = setting(1, at_least(1))
    finetune_lr: float = setting(1.0e-5, above(0))  # the tuned stages' own peak rate (docs/training.md)
    finetune_after_epochs: int = setting(0, at_least(0))  # frozen this many epochs first
    augment: bool = True            # horizontal flips, "left"/"right" swapped in the flipped image's captions
    # Random resized crops: the share of the image area kept; [1.0, 1.0] = none. A crop moves and
    # rescales objects whose size and position the captions state: use only where captions do not.
    crop_scale: list[float] = setting([1.0, 1.0], Rule(lambda v: len(v) == 2 and 0 < v[0] <= v[1] <= 1,
                                                       "[low, high] with 0 < low <= high <= 1"))


# The layouts of precomputed feature files data/feature_source.py reads.
FEATURE_FORMATS = ("npy_dir", "npz_dir", "npz")


@dataclass
class Precomputed(Normalised):
    """Features you already have, read from files named by image id (bottom-up regions with
    boxes, or CLIP/ViT grids), copied once into a feature store (data/precomputed.py; layouts:
    docs/precomputed_features.md)."""

    name: str = "precomputed"
    path: str = REQUIRED               # a folder of <image_id>.npy / .npz, or one .npz with an `ids` array
    format: str = setting("auto", one_of("auto", *FEATURE_FORMATS))  # auto: from what `path` is
    features_key: str = "features"  # the features' array name inside .npz files (bottom-up: often feat)
    boxes_key: str = "boxes"        # the boxes' array name inside .npz files; absent from a file: no boxes
    boxes_path: str | None = None   # or a folder of <image_id>.npy boxes (N, 4), bottom-up's layout
    # the boxes' units: normalized (x1, y1, x2, y2 divided by the image's width and height) or
    # pixels (as bottom-up's cocobu_box files hold them), divided here by each image's size
    box_units: str = setting("normalized", one_of("normalized", "pixels"))
    # for box_units=pixels: COCO annotation files (images[]: id, width, height) giving the sizes;
    # empty: each image's own file (its header only)
    image_sizes: list[str] = setting([])
    grid: bool = False              # true: each file is one square grid of cells, row-major (CLIP/ViT)
    # true: each file's first row is a global vector (ViT's class token), the rest the grid or
    # regions: the decoders start from it and attend over the rest (extract_features.py writes it)
    global_first: bool = False
    dim: int | None = setting(None, at_least(1))  # the width: read from the files (set it to check them)
    finetune: bool = False          # there is no network to tune: always false
    # What the real-data presets (conf/data/karpathy.yaml) set for a ResNet: here only the size
    # the images are shown at (wandb media; null: 224); there are no weights to load.
    image_size: int | None = setting(None, at_least(1))
    pretrained: bool = False


def encoder_schema(name: str) -> type:
    """encoder=<name>: features you bring, or a ResNet extracted here."""
    return Precomputed if name == "precomputed" else ResNet


@dataclass
class ScheduledSampling:
    """From start_epoch, the probability of feeding the model's own previous word (argmax)
    instead of the reference rises linearly to max_prob over ramp_epochs (the Transformer does
    it in two passes: one extra forward per step). max_prob 0 = off."""

    max_prob: float = setting(0.0, between(0, 1))
    start_epoch: int = setting(0, at_least(0))
    ramp_epochs: int = setting(1, at_least(1))


@dataclass
class Model:
    """`model:`: what is built around the decoder."""

    compile: bool = False   # true: torch.compile the cross-attention modules (cost: first_step_s)
    scheduled_sampling: ScheduledSampling = setting(ScheduledSampling())
    # Key-side refiner, once per image before any cross-attention mode: none | self_attention
    # (L pre-norm Transformer layers over the grid cells in a bottleneck of refiner_dim, added back).
    refiner: str = "none"
    refiner_layers: int = setting(2, at_least(1))
    refiner_dim: int = setting(512, at_least(1))
    refiner_heads: int = setting(8, at_least(1))
