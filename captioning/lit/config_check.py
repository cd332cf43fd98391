"""Everything wrong with a run config that the config alone can tell, found in a second, before
any data is generated, any feature extracted or any model built for real.

Unknown keys (a typo, or a `+key=` that nothing reads) are found against the shipped configs:
the keys of every option of a config group in conf/ (for `attention`, `decoder` and `encoder`:
of the option chosen), train.yaml's own keys, and, for `trainer.*`, pytorch_lightning.Trainer's
arguments. `logger.*` and the kwargs of `optim.*._target_` are extension points, checked against
their targets' signatures where there is one.
"""

from __future__ import annotations

import difflib
import inspect
import shutil
import tempfile
from functools import cache
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from pytorch_lightning.plugins import CheckpointIO

from ..errors import UserError
from ..models.attention import cross_attention_modules
from ..models.captioner import build_captioner
from ..models.encoder import ENCODERS, PRECISIONS, encoder_dim, find_weights, grid_cells
from ..models.refiner import REFINERS
from ..paths import conf_dir
from ..predict import DECODE_DEFAULTS, decode_problems
from ..provenance import flatten, get_dotted
from ..visualize import SCALES
from .precision import TRAIN_PRECISIONS

CONF_DIR = conf_dir()

# Keys of ours under `trainer:` (popped before pytorch_lightning.Trainer is built).
OWN_TRAINER_KEYS = {"nan_policy": "stop | skip", "nan_max_in_row": "skip at most this many in a row",
                    "matmul_precision": "torch.set_float32_matmul_precision",
                    "num_threads": "torch.set_num_threads (null: torch's default)"}

# Sections whose content is a plug-in's own kwargs: not checked against the shipped keys.
EXTENSION_POINTS = ("logger", "callbacks", "hydra", "compare.slurm", "compare.gallery", "compare.rates",
                    "compare.dim_limits", "compare.decoder_limits")

# Trainer arguments that build_trainer sets itself: a value in the config would be overwritten,
# so each is refused with where the setting lives instead (trainer.plugins is honoured, but a
# CheckpointIO refused: see trainer_problems).
TRAINER_OWNED = {
    "callbacks": "callbacks are a config group of their own, merged with the run's checkpoint, "
                 "early-stopping and logging callbacks: callbacks=<name> (conf/callbacks/) or "
                 "+callbacks.<name>._target_=<class>",
    "logger": "loggers come from the logger group: logger=wandb|csv|tensorboard|all|none, or "
              "+logger.<name>._target_=<class> for another one",
}

# Bytes per stored feature value (float16); per trainable parameter in a full-state checkpoint
# (float32 weights + AdamW's two moments) and per buffer value (the normaliser's, float32).
FEATURE_BYTES, CHECKPOINT_BYTES_PER_PARAM, CHECKPOINT_BYTES_PER_BUFFER = 2, 12, 4


class ConfigError(UserError):
    """One or more config problems; the message lists each with its key and the fix."""


def _load_option(path: Path) -> dict:
    """An option file merged over the options its `defaults:` names in the same group."""
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    merged: dict = {}
    for entry in raw.pop("defaults", None) or []:
        if isinstance(entry, str) and entry != "_self_":
            base = path.parent / f"{entry}.yaml"
            if base.is_file():
                merged = OmegaConf.to_container(OmegaConf.merge(merged, _load_option(base)))
    return OmegaConf.to_container(OmegaConf.merge(merged, raw)) if merged else raw


@cache
def _shipped() -> dict:
    """{'': train.yaml keys (dotted) + every @package _global_ preset's, 'options': {group:
    {option: (its config, its dotted keys)}}}."""
    known = {"": set(), "options": {}}
    top = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "train.yaml"), resolve=False)
    top.pop("defaults", None)
    top.pop("hydra", None)
    known[""] |= set(flatten(top))
    for path in sorted(CONF_DIR.glob("*/*.yaml")):
        group, option = path.parent.name, path.stem
        raw = _load_option(path)
        glob = path.read_text().lstrip().startswith("# @package _global_")
        keys = set(flatten(raw)) if glob else {f"{group}.{k}" for k in flatten(raw)}
        if glob:  # presets that set keys of other groups (real-data presets, experiments)
            known[""] |= keys
        known["options"].setdefault(group, {})[option] = (raw.get(group, raw) if glob else raw,
                                                          keys)
    return known


def _known_keys(cfg: dict) -> set[str]:
    shipped = _shipped()
    keys = set(shipped[""])
    for group, options in shipped["options"].items():
        for option, (raw, option_keys) in options.items():
            # attention/decoder/encoder: the chosen option's keys only (its constructor's kwargs)
            if group in ("attention", "decoder", "encoder"):
                chosen = (cfg.get(group) or {}).get("name")
                if raw.get("name") != chosen:
                    continue
            keys |= option_keys
    return keys


def _closest(key: str, candidates: set[str]) -> str:
    match = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else ""


def _kwargs_of(target: str) -> set[str] | None:
    try:
        params = inspect.signature(hydra.utils.get_object(target)).parameters
    except (ImportError, ValueError, TypeError, AttributeError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)


def unknown_keys(cfg: dict) -> list[str]:
    """Problems for keys nothing reads, each with the closest valid key."""
    problems = []
    known = _known_keys(cfg)
    trainer_keys = set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}
    trainer_keys |= set(OWN_TRAINER_KEYS) | {"_target_"}
    for key in flatten(cfg):
        if any(key == p or key.startswith(p + ".") for p in EXTENSION_POINTS):
            continue
        section, _, rest = key.partition(".")
        if section == "trainer":
            if rest.split(".")[0] not in trainer_keys:
                problems.append(f"trainer.{rest}: not an argument of pytorch_lightning.Trainer "
                                f"nor one of ours ({', '.join(OWN_TRAINER_KEYS)})"
                                + _closest(rest, trainer_keys))
            continue
        if section == "optim" and rest.split(".")[0] in ("optimizer", "scheduler"):
            part, _, arg = rest.partition(".")
            spec = cfg["optim"][part] or {}
            target = spec.get("_target_")  # none: schedule=constant's `scheduler: null`
            allowed = _kwargs_of(target) if target and arg not in ("", "_target_", "_partial_") else None
            if allowed is not None and arg not in allowed:
                problems.append(f"optim.{part}.{arg}: {spec['_target_']} takes no '{arg}'"
                                + _closest(arg, allowed))
            continue
        if key not in known:
            where = f" (valid for {section}={cfg[section].get('name')}: " + ", ".join(
                sorted(k.partition(".")[2] for k in known if k.startswith(section + "."))) + ")" \
                if section in ("attention", "decoder", "encoder") and isinstance(cfg.get(section), dict) \
                else ""
            problems.append(f"{key}: unknown key, read by nothing{where}" + _closest(key, known))
    return problems


# (key, test, what it must be). Keys that are absent are not checked.
RULES = [
    ("decode.beam_size", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1 (1 = greedy)"),
    ("decode.max_len", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("decode.alpha", lambda v: v >= 0, ">= 0 (0 ranks by log-probability)"),
    ("decode.block_ngram", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0 (0 = off)"),
    ("decode.min_len", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0 (0 = off)"),
    ("decode.temperature", lambda v: v > 0, "> 0 (greedy is decode.beam_size=1)"),
    ("decode.top_k", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0 (0 = no cut)"),
    ("decode.top_p", lambda v: 0 < v <= 1, "in (0, 1] (1.0 = no cut)"),
    ("decode.seed", lambda v: isinstance(v, int), "an integer"),
    ("decode.n_best", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("trainer.max_epochs", lambda v: isinstance(v, int) and v >= 1,
     "an integer >= 1 (the one-cycle schedule needs a finite length; -1 = endless is not offered)"),
    ("trainer.nan_policy", lambda v: v in ("stop", "skip"), "stop or skip"),
    ("trainer.nan_max_in_row", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0"),
    ("trainer.precision", lambda v: str(v) in TRAIN_PRECISIONS, " | ".join(TRAIN_PRECISIONS)),
    ("trainer.num_threads", lambda v: isinstance(v, int) and v >= 1, "null or an integer >= 1"),
    ("trainer.matmul_precision", lambda v: v in ("highest", "high", "medium"),
     "highest, high (TF32) or medium"),
    ("media.attention_scale", lambda v: v in SCALES, " or ".join(SCALES)),
    ("optim.lr_scaling", lambda v: v in ("none", "sqrt", "linear"), "none, sqrt or linear"),
    ("optim.optimizer.lr", lambda v: v > 0, "> 0"),
    ("optim.optimizer.weight_decay", lambda v: v >= 0, ">= 0"),
    ("checkpoint.snapshot_epochs", lambda v: all(isinstance(e, int) and e >= 1 for e in v),
     "a list of epochs (integers >= 1)"),
    ("early_stopping.patience", lambda v: isinstance(v, int) and v >= 0, "null or an integer >= 0"),
    ("early_stopping.min_delta", lambda v: v >= 0, ">= 0"),
    ("model.scheduled_sampling.max_prob", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("model.scheduled_sampling.start_epoch", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0"),
    ("model.scheduled_sampling.ramp_epochs", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("model.refiner", lambda v: v == "none" or v in REFINERS, "none or " + " | ".join(REFINERS.names())),
    ("model.refiner_layers", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("model.refiner_dim", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("model.refiner_heads", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("optim.alpha_c", lambda v: v >= 0, ">= 0 (0 = off)"),
    ("optim.label_smoothing", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("data.batch_size", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("data.eval_batch_size", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("data.num_workers", lambda v: v == "auto" or isinstance(v, int) and v >= 0,
     "an integer >= 0 or auto"),
    ("data.max_caption_len", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("data.captions_per_image", lambda v: isinstance(v, int) and v >= 1, "null or an integer >= 1"),
    ("data.min_word_freq", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("data.synthetic.num_train", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("data.synthetic.num_val", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("data.synthetic.num_test", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("data.synthetic.image_size", lambda v: isinstance(v, int) and v >= 48, "an integer >= 48"),
    ("encoder.image_size", lambda v: isinstance(v, int) and v >= 32,
     "an integer >= 32 (the ResNet's stride)"),
    ("encoder.finetune_stages", lambda v: isinstance(v, int) and 1 <= v <= 5,
     "an integer 1..5 (1 = layer4 ... 4 = layer1-4, 5 = the stem too)"),
    ("encoder.finetune_lr", lambda v: v > 0, "> 0"),
    ("encoder.finetune_after_epochs", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0"),
    ("encoder.crop_scale", lambda v: len(v) == 2 and 0 < v[0] <= v[1] <= 1,
     "[low, high] with 0 < low <= high <= 1"),
    ("encoder.batch_size", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
    ("encoder.precision", lambda v: v in PRECISIONS, " | ".join(PRECISIONS)),
    ("encoder.num_workers", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0"),
    ("checkpoint.every_n_steps", lambda v: isinstance(v, int) and v >= 0,
     "an integer >= 0 (0: at epoch ends only)"),
    ("checkpoint.mode", lambda v: v in ("min", "max"), "min or max"),
    ("training.objective", lambda v: v in ("ce", "scst"), "ce (cross-entropy) or scst (self-critical)"),
    ("training.samples", lambda v: isinstance(v, int) and v >= 2,
     "an integer >= 2 (the mean baseline needs the other samples)"),
    ("training.baseline", lambda v: v in ("mean", "greedy"), "mean or greedy"),
    ("training.max_len", lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
]


def trainer_problems(cfg: dict) -> list[str]:
    """`trainer.*` keys that build_trainer would silently overwrite, and plug-ins it cannot take."""
    trainer = cfg.get("trainer") or {}
    problems = [f"trainer.{key}: set by the run itself, so this value would be ignored; {where}"
                for key, where in TRAINER_OWNED.items() if trainer.get(key) is not None]
    if trainer.get("use_distributed_sampler"):
        problems.append("trainer.use_distributed_sampler=true: the data module shards the training "
                        "set by rank itself (data/sampler.py: one shuffled order per epoch, the same "
                        "on every process, so resume and DDP stay exact); Lightning's sampler would "
                        "replace it. Leave it unset (false)")
    plugins = trainer.get("plugins")
    for i, plugin in enumerate(plugins if isinstance(plugins, list) else [plugins] if plugins else []):
        target = plugin.get("_target_") if isinstance(plugin, dict) else None
        cls = _object(target) if target else None
        if not isinstance(cls, type):
            problems.append(f"trainer.plugins[{i}]: needs a _target_ naming a Lightning plugin class "
                            f"(got {plugin!r})")
        elif issubclass(cls, CheckpointIO):
            problems.append(f"trainer.plugins[{i}]={target}: checkpoints are written by the run's own "
                            "CheckpointIO (atomic: a kill mid-write keeps the previous file), which "
                            "this would replace; remove it")
    return problems


def callback_problems(cfg: dict) -> list[str]:
    """Every `callbacks.<name>` names a pytorch_lightning Callback (null entries are switched off)."""
    problems = []
    for name, spec in (cfg.get("callbacks") or {}).items():
        if spec is None:
            continue
        target = spec.get("_target_") if isinstance(spec, dict) else None
        cls = _object(target) if target else None
        if not (isinstance(cls, type) and issubclass(cls, pl.Callback)):
            problems.append(f"callbacks.{name}: needs a _target_ naming a pytorch_lightning Callback "
                            f"class (got {target or spec!r}); see conf/callbacks/ for examples")
    return problems


def _object(target: str):
    try:
        return hydra.utils.get_object(target)
    except (ImportError, ValueError, AttributeError):
        return None


def bad_values(cfg: dict) -> list[str]:
    problems = trainer_problems(cfg) + callback_problems(cfg)
    for key, ok, must in RULES:
        value = get_dotted(cfg, key)
        if value is None:
            continue
        try:
            good = not isinstance(value, bool) and ok(value)
        except TypeError:
            good = False
        if not good:
            problems.append(f"{key}={value!r}: must be {must}")
    problems += scst_problems(cfg) + precomputed_problems(cfg)
    problems += decode_problems({**DECODE_DEFAULTS, **(cfg.get("decode") or {})})
    enc = cfg.get("encoder") or {}
    if enc.get("name") in ENCODERS:
        width = encoder_dim(enc["name"])
        pca = enc.get("pca_dim")
        if pca is not None and not (isinstance(pca, int) and 1 <= pca <= width):
            problems.append(f"encoder.pca_dim={pca!r}: must be null or 1..{width} ({enc['name']} "
                            f"features are {width}-d)")
    return problems


# Modes whose positions are cells of a square grid: over region features they mean nothing.
GRID_MODES = {"local": "a Gaussian window over grid cells", "hierarchical": "blocks of grid cells"}


def precomputed_problems(cfg: dict) -> list[str]:
    """encoder=precomputed: no network to tune; over regions (encoder.grid=false) no mode that
    needs grid cells (relative_2d is defined on boxes: data/precomputed.resolve_source)."""
    enc, att = cfg.get("encoder") or {}, cfg.get("attention") or {}
    if enc.get("name") != "precomputed":
        return []
    problems = []
    if enc.get("finetune"):
        problems.append("encoder.finetune=true: precomputed features have no network to tune; "
                        "use encoder.finetune=false")
    if enc.get("grid"):
        return problems
    names = {att.get("name"), att.get("base")}
    fix = ("; with grid features (CLIP/ViT patches, one square grid per image) set "
           "encoder.grid=true, else choose a mode that reads no grid (e.g. attention=additive)")
    for name in sorted(n for n in names if n in GRID_MODES):
        problems.append(f"attention={name} needs {GRID_MODES[name]}; encoder=precomputed with "
                        f"encoder.grid=false holds regions{fix}")
    if "graph" in names and att.get("adjacency", "grid8") == "grid8":
        problems.append("attention=graph with attention.adjacency=grid8 joins grid neighbours; "
                        "over regions use attention.adjacency=knn" + fix)
    return problems


def scst_problems(cfg: dict) -> list[str]:
    """training=scst: a second stage, from a cross-entropy checkpoint; the CE-only recipes off."""
    if (cfg.get("training") or {}).get("objective") != "scst":
        return []
    problems = []
    if not cfg.get("init_from"):
        problems.append("training=scst needs init_from=<run>/checkpoints/best.ckpt: self-critical "
                        "training refines a cross-entropy model (from scratch its samples are "
                        "noise and every reward is ~0); train one first with `python train.py`")
    for key, off in (("optim.alpha_c", 0), ("model.scheduled_sampling.max_prob", 0)):
        if (value := get_dotted(cfg, key)) not in (None, off):
            problems.append(f"{key}={value} with training=scst: a cross-entropy recipe, unused by "
                            f"the self-critical loss; set {key}={off}")
    return problems


def model_problems(cfg: dict) -> tuple[list[str], int]:
    """Build the model on the meta device (no memory, no init): every constructor check (an
    attention mode that needs equal widths, a bad option value) runs now.
    -> (problems, bytes of one full-state checkpoint, estimated)."""
    try:
        with torch.device("meta"):
            model = build_captioner(cfg, vocab_size=1000)
    except (ValueError, TypeError, KeyError) as err:
        return [f"attention={cfg['attention'].get('name')} decoder={cfg['decoder'].get('name')} "
                f"encoder={cfg['encoder'].get('name')}: {err}"], 0
    alpha_c = (cfg.get("optim") or {}).get("alpha_c") or 0
    if alpha_c and not all(m.weights_make_context for m in cross_attention_modules(model.decoder)):
        return [f"optim.alpha_c={alpha_c} with attention={cfg['attention'].get('name')}: its attention "
                "weights are computed for diagnostics only (the context never uses them), so "
                "regularising them would train nothing the model uses; use another mode or "
                "optim.alpha_c=0"], 0
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers())
    return [], params * CHECKPOINT_BYTES_PER_PARAM + buffers * CHECKPOINT_BYTES_PER_BUFFER


def _free_bytes(path: Path) -> int:
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def file_problems(cfg: dict, checkpoint_bytes: int) -> list[str]:
    """Weights present, output dir writable, room on disk for checkpoints (and, for the built-in
    dataset, its feature store)."""
    problems = []
    enc = cfg.get("encoder") or {}
    if enc.get("pretrained") and enc.get("name") in ENCODERS:
        try:
            find_weights(enc["name"], enc.get("weights_path"))
        except FileNotFoundError as err:
            problems.append(str(err))
    data = cfg.get("data") or {}
    for key in ("json_path", "split_file"):
        if not data.get("synthetic") and data.get(key) and not Path(data[key]).expanduser().is_file():
            problems.append(f"data.{key}={data[key]}: no such file (data/README.md: where the "
                            "dataset files go)")
    if cfg.get("init_from") and not Path(cfg["init_from"]).expanduser().is_file():
        problems.append(f"init_from={cfg['init_from']}: no such file (a *.ckpt written by train.py)")
    if cfg.get("resume") and cfg.get("init_from"):
        problems.append("resume and init_from together: resume continues a run (its weights "
                        "included); init_from starts a new one from a checkpoint. Pick one.")
    out = Path((cfg.get("paths") or {}).get("output_dir") or ".")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out):
            pass
    except OSError as err:
        problems.append(f"paths.output_dir={out}: not writable ({err.strerror or err}); run from "
                        "a writable directory or set paths.log_dir=/writable/dir")
        return problems
    # last.ckpt + best.ckpt + one temp file while either is rewritten, + 50 MiB of logs.
    need = 3 * checkpoint_bytes + 50 * 2**20
    if (free := _free_bytes(out)) < need:
        problems.append(f"paths.output_dir={out}: {_size(free)} free, the run needs about "
                        f"{_size(need)} (3 checkpoints of {_size(checkpoint_bytes)} + logs)")
    syn = (cfg.get("data") or {}).get("synthetic")
    if syn and enc.get("name") in ENCODERS and enc.get("image_size"):
        images = syn["num_train"] + syn["num_val"] + syn["num_test"]
        cells = grid_cells(enc["image_size"])
        need = images * cells * encoder_dim(enc["name"]) * FEATURE_BYTES
        cache = Path(cfg["data"].get("cache_dir") or out)
        if (free := _free_bytes(cache)) < need:
            problems.append(f"data.cache_dir={cache}: {_size(free)} free, the feature store of "
                            f"{images} images needs about {_size(need)}")
    return problems


def check_config(cfg: dict) -> None:
    """Raise ConfigError listing every problem found from the resolved config alone."""
    problems = unknown_keys(cfg) + bad_values(cfg)
    model, checkpoint_bytes = model_problems(cfg) if not problems else ([], 0)
    problems += model
    if not problems:
        problems += file_problems(cfg, checkpoint_bytes)
    if problems:
        raise ConfigError("bad config (nothing was started):\n  - " + "\n  - ".join(problems))

