"""Typed config schemas: one home for every setting's default, type and allowed range.

Each config group's options (conf/<group>/<option>.yaml) name a dataclass registered in Hydra's
ConfigStore as `schema_<name>` (`defaults: [schema_additive]`): the yaml is a preset over it and
holds only what differs. Hydra types the composed config by them (a typo'd override, a string for
an integer, fails at once); `problems` checks a plain config dict the same way (unknown keys
with the nearest valid one, types, ranges: lit/config_check.py), and `complete` fills what a
config saved by an older version lacks. Entry points call `register()` before Hydra composes.

    schema/fields.py     setting(), Rule, check(), complete()
    schema/attention.py  one schema per attention mode, derived from its constructor
    schema/model.py      decoders, encoders, the model: section
    schema/data.py       the built-in dataset, Karpathy-format datasets
    schema/run.py        trainer, objective, schedules, checkpoints, decoding, optimiser, root
    schema/compare.py    scripts/compare.py's grid, sweep, report and executor
    schema/scripts.py    evaluate.py, caption.py, gallery.py
"""

from __future__ import annotations

import warnings

from .attention import ATTENTION
from .compare import GalleryCells
from .data import Karpathy, Synthetic, data_schema
from .fields import Problem, check, complete
from .model import DECODER, Precomputed, ResNet, encoder_schema
from .run import (
    SCHEDULES,
    CrossEntropy,
    SelfCritical,
    Train,
    Trainer,
    TrainerDdp,
    training_schema,
)
from .scripts import Caption, Evaluate, Gallery

# (group, option schema) for every `schema_<name>` a yaml's defaults list names.
GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "encoder": {"resnet": ResNet, "precomputed": Precomputed},
    "data": {"synthetic": Synthetic, "karpathy": Karpathy},
    "trainer": {"trainer": Trainer, "trainer_ddp": TrainerDdp},
    "training": {"ce": CrossEntropy, "scst": SelfCritical},
    "schedule": {s.__name__.lower(): s for s in SCHEDULES.values()},
}
# The groups whose options are the registries' names, each schema derived from its constructor.
DERIVED_GROUPS: dict[str, dict[str, type]] = {"attention": ATTENTION, "decoder": DECODER}
# The primary configs (conf/<name>.yaml): `defaults: [schema_<name>, ...]`.
ROOT_SCHEMAS: dict[str, type] = {"train": Train, "evaluate": Evaluate, "caption": Caption,
                                 "gallery": Gallery}


def register() -> None:
    """Put every schema into Hydra's ConfigStore (idempotent); call before Hydra composes."""
    from hydra.core.config_store import ConfigStore

    # schema.run.Trainer subclasses Dict to hold any Trainer argument; OmegaConf 2.3 warns that
    # it will drop this one day (omegaconf#663): the test suite pins the version that has it.
    warnings.filterwarnings("ignore", message="Class `Trainer(Ddp)?` subclasses `Dict`")
    store = ConfigStore.instance()
    for group, options in GROUP_SCHEMAS.items():
        for name, schema in options.items():
            store.store(group=group, name=f"schema_{name}", node=schema)
    # Components whose schema comes from their constructor need no yaml: the registry's names
    # are the group's options (`attention=<name>`, listed by --help).
    for group, options in DERIVED_GROUPS.items():
        for name, schema in options.items():
            store.store(group=group, name=name, node=schema)
    for name, schema in ROOT_SCHEMAS.items():
        store.store(name=f"schema_{name}", node=schema)


def choose(path: str, value: dict) -> type | None:
    """The schema of a section chosen by its content (a config group's option); None: an
    extension point (logger, callbacks, an unknown name: the registry's own error names it)."""
    if path == "attention":
        return ATTENTION.get(value.get("name"))
    if path == "decoder":
        return DECODER.get(value.get("name"))
    if path == "encoder":
        return encoder_schema(value.get("name"))
    if path == "data":
        return data_schema(value)
    if path == "trainer":
        return Trainer  # Lightning's other arguments: checked against its signature (config_check)
    if path == "training":
        return training_schema(value)
    if path == "compare.gallery":
        return GalleryCells
    if path == "optim.scheduler":
        return SCHEDULES.get(value.get("_target_"))
    return None


def problems(cfg: dict, schema: type = Train) -> list[Problem]:
    """Every unknown key, wrong type and out-of-range value of a plain config dict."""
    found = check(cfg, schema, choose)
    att = cfg.get("attention")
    if isinstance(att, dict) and isinstance(att.get("base_args"), dict) and att.get("base") in ATTENTION:
        found += check(att["base_args"], ATTENTION[att["base"]], choose, "attention.base_args.")
    return found


def completed(cfg: dict, schema: type = Train, at: str = "") -> dict:
    """`cfg` with every key the schemas have and it lacks set to its default; `at`: where the
    section sits in a run config ("compare."), for the sections whose schema it chooses."""
    return complete(cfg, schema, choose, at)
