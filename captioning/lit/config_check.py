"""Everything wrong with a run config that the config alone can tell, found in a second, before
any data is generated, any feature extracted or any model built for real.

Unknown keys, types and ranges come from the schemas (captioning/schema/: one home for each
setting), with the nearest valid key for a typo; `trainer.*` keys beyond the schema's are checked
against pytorch_lightning.Trainer's arguments, `optim.*` against their targets' signatures.
Here: what depends on code or on several keys at once (cross-field rules, the model built on
the meta device); files and room on disk: lit/file_checks.py.
"""

from __future__ import annotations

import inspect

import hydra
import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins import CheckpointIO

from .. import schema
from ..errors import UserError
from ..models.attention import cross_attention_modules
from ..models.captioner import build_captioner
from ..models.encoder import PRECISIONS
from ..models.encoder_specs import (
    ENCODERS,
    dependency_problem,
    encoder_dim,
    finetune_problem,
    size_problem,
)
from ..models.normalizer import NORMALIZE_METHODS
from ..models.refiner import REFINERS
from ..predict import decode_problems
from ..provenance import get_dotted
from ..schema.fields import Problem
from ..schema.run import OWN_TRAINER_KEYS
from ..visualize import SCALES
from .auto_precision import TRAIN_PRECISIONS
from .file_checks import file_problems

# Not a setting of the run: Hydra's own section, when a config carries it. (The plug-ins'
# sections, logger, callbacks, compare.slurm and the like, are typed Any or dict[str, Any] in the
# schemas, so nothing inside them is reported as unknown.)
EXTENSION_POINTS = ("hydra",)

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

# Bytes per trainable parameter in a full-state checkpoint (float32 weights + AdamW's two
# moments) and per buffer value (the normaliser's, float32).
CHECKPOINT_BYTES_PER_PARAM, CHECKPOINT_BYTES_PER_BUFFER = 12, 4

# Allowed values whose home is the code that uses them, not a schema.
CODE_RULES = [
    ("trainer.precision", lambda v: str(v) in TRAIN_PRECISIONS, " | ".join(TRAIN_PRECISIONS)),
    ("encoder.precision", lambda v: v in PRECISIONS, " | ".join(PRECISIONS)),
    ("encoder.normalize", lambda v: v in NORMALIZE_METHODS, " or ".join(NORMALIZE_METHODS)),
    ("media.attention_scale", lambda v: v in SCALES, " or ".join(SCALES)),
    ("model.refiner", lambda v: v == "none" or v in REFINERS, "none or " + " | ".join(REFINERS.names())),
]


class ConfigError(UserError):
    """One or more config problems; the message lists each with its key and the fix."""


def _kwargs_of(target: str) -> set[str] | None:
    try:
        params = inspect.signature(hydra.utils.get_object(target)).parameters
    except (ImportError, ValueError, TypeError, AttributeError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)


def _unknown(problem: Problem, cfg: dict) -> str | None:
    """The message for a key no schema has, or None where another rule accepts it (a Trainer
    argument, an optimiser's or scheduler's keyword, an extension point)."""
    key = problem.key
    if any(key == p or key.startswith(p + ".") for p in EXTENSION_POINTS):
        return None
    section, _, rest = key.partition(".")
    if section == "trainer":
        arg = rest.split(".")[0]
        trainer_keys = set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}
        if arg in trainer_keys:
            return None
        return (f"trainer.{rest}: not an argument of pytorch_lightning.Trainer nor one of ours "
                f"({', '.join(OWN_TRAINER_KEYS)})"
                + Problem(arg, valid=tuple(trainer_keys | set(OWN_TRAINER_KEYS))).closest())
    if section == "optim" and rest.split(".")[0] in ("optimizer", "scheduler"):
        part, _, arg = rest.partition(".")
        target = (cfg["optim"][part] or {}).get("_target_")
        allowed = _kwargs_of(target) if target else None
        if allowed is None or arg.split(".")[0] in allowed:
            return None
        return f"optim.{part}.{arg}: {target} takes no '{arg}'" + Problem(arg, valid=tuple(allowed)).closest()
    if section in ("attention", "decoder", "encoder") and isinstance(cfg.get(section), dict) \
            and "." in key and not key.startswith("attention.base_args."):
        valid = ", ".join(sorted(k.rpartition(".")[2] for k in problem.valid))
        return (f"{key}: unknown key, read by nothing (valid for {section}="
                f"{cfg[section].get('name')}: {valid})" + problem.closest())
    return str(problem)


def schema_problems(cfg: dict) -> list[str]:
    """Unknown keys, wrong types and out-of-range values, from the schemas."""
    out = []
    for problem in schema.problems(cfg):
        message = _unknown(problem, cfg) if problem.unknown else str(problem)
        if message:
            out.append(message)
    return out


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
    """The rules beyond one key's schema: trainer plug-ins, callbacks, values whose allowed set
    lives in code, and the cross-field rules."""
    problems = trainer_problems(cfg) + callback_problems(cfg)
    for key, ok, must in CODE_RULES:
        if (value := get_dotted(cfg, key)) is not None and not ok(value):
            problems.append(f"{key}={value!r}: must be {must}")
    problems += scst_problems(cfg) + precomputed_problems(cfg) + decode_problems(cfg["decode"])
    enc = cfg["encoder"]
    if enc["name"] in ENCODERS and (pca := enc["pca_dim"]) is not None:
        width = encoder_dim(enc["name"])
        if not (isinstance(pca, int) and 1 <= pca <= width):
            problems.append(f"encoder.pca_dim={pca!r}: must be null or 1..{width} ({enc['name']} "
                            f"features are {width}-d)")
    if enc["name"] in ENCODERS and (why := dependency_problem(enc["name"])):
        problems.append(why)
    if enc["name"] in ENCODERS and (why := size_problem(enc["name"], enc["image_size"])):
        problems.append(f"encoder.image_size={enc['image_size']}: {why}")
    tuned = enc["name"] in ENCODERS and enc.get("finetune")
    if tuned and (why := finetune_problem(enc["name"], enc["finetune_stages"])):
        problems.append(why)
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
    if "graph" in names and att["adjacency"] == "grid8":
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


def check_config(cfg: dict) -> None:
    """Raise ConfigError listing every problem found from the resolved config alone."""
    problems = schema_problems(cfg) + bad_values(schema.completed(cfg))
    model, checkpoint_bytes = model_problems(cfg) if not problems else ([], 0)
    problems += model
    if not problems:
        problems += file_problems(cfg, checkpoint_bytes)
    if problems:
        raise ConfigError("bad config (nothing was started):\n  - " + "\n  - ".join(problems))

