"""The pieces every schema is made of: a setting (default + allowed range + a note, one home for
all three), and the two walks over a plain config dict that use them: `check` (unknown keys,
wrong types, values out of range) and `complete` (missing keys filled with their defaults).

Pure Python (dataclasses): `captioning.models` may read a schema's defaults without Hydra."""

import copy
import dataclasses
import difflib
import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any

from ..rules import Rule, above, at_least, between, one_of  # noqa: F401  (re-exported)

# A value the config must set (OmegaConf's MISSING): `???` in a yaml or a schema.
REQUIRED = "???"


def unset(value: Any) -> bool:
    """A path-like setting left empty: null, "" or still REQUIRED."""
    return value in (None, "", REQUIRED)


def setting(default: Any = MISSING, rule: Rule | None = None, note: str = "", must: str = "") -> Any:
    """A dataclass field: its default, its allowed range and a note for the error message
    (`must` replaces the whole generated "must be ..." text)."""
    meta = {"rule": rule, "note": note, "must": must}
    if isinstance(default, list | dict) or dataclasses.is_dataclass(default):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def from_signature(name: str, builder: Callable, skip: tuple[str, ...] = ()) -> type:
    """The schema of a registered component, derived from its constructor so that each setting's
    default, type and range are written once, there: a `name` field (the option's name), then
    every keyword that has a default, typed by its annotation, its range from an
    `Annotated[type, rule]` (captioning/rules.py). `builder` may be a functools.partial (a
    registered variant): the keywords it fixes are no settings. `skip`: keywords the caller
    supplies (a decoder's widths)."""
    fixed = builder.keywords if isinstance(builder, functools.partial) else {}
    target = builder.func if isinstance(builder, functools.partial) else builder
    init = target.__init__ if isinstance(target, type) else target
    hints = typing.get_type_hints(init, include_extras=True)
    specs: list[tuple] = [("name", str, field(default=name))]
    for param in inspect.signature(init).parameters.values():
        if (param.default is inspect.Parameter.empty or param.name in skip or param.name in fixed
                or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD)):
            continue
        hint, rule = hints.get(param.name, Any), None
        if typing.get_origin(hint) is typing.Annotated:
            hint, *extras = typing.get_args(hint)
            rule = next((e for e in extras if isinstance(e, Rule)), None)
        default = dict(param.default) if isinstance(param.default, Mapping) else param.default
        specs.append((param.name, hint, setting(default, rule)))
    title = "".join(part.title() for part in name.split("_"))
    schema = dataclasses.make_dataclass(title, specs)
    schema.__doc__ = (target.__doc__ or "").strip().split("\n\n")[0]
    schema.__module__ = __name__
    schema.__derived_from__ = target  # the one home of its defaults
    return schema


def _default(f: dataclasses.Field) -> Any:
    """A field's default as plain data (a nested schema as a dict), or MISSING."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        value = f.default_factory()
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return MISSING


def defaults(schema: type) -> dict:
    """{field: default} of a schema, nested schemas as dicts; fields without one left out."""
    return {f.name: d for f in dataclasses.fields(schema) if (d := _default(f)) is not MISSING}


@functools.cache
def _hints(schema: type) -> dict:
    return typing.get_type_hints(schema)


def _optional(hint) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else Any), len(args) < len(typing.get_args(hint))
    return hint, False


def _entry_schema(hint) -> type | None:
    """Schema of the entries of a dict[str, Schema] field, else None."""
    if typing.get_origin(hint) is dict:
        args = typing.get_args(hint)
        if len(args) == 2 and dataclasses.is_dataclass(args[1]):
            return args[1]
    return None


def _type_ok(value, hint) -> bool:
    if hint is Any:
        return True
    origin = typing.get_origin(hint) or hint
    if origin is bool:
        return isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin is str:
        return isinstance(value, str)
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_type_ok(v, item) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    return True


_TYPE_WORDS = {int: "an integer", bool: "true or false", str: "a string", float: "a number"}


def _must(f: dataclasses.Field, hint, nullable: bool) -> str:
    meta = f.metadata
    if meta.get("must"):
        return meta["must"]
    rule: Rule | None = meta.get("rule")
    # "an integer >= 1", but "> 0" for a number and "stop or skip" for a string
    origin = typing.get_origin(hint) or hint
    words = _TYPE_WORDS.get(origin, "a list" if origin is list else "")
    text = f"{words} {rule.text}".strip() if rule and hint is int else (rule.text if rule else words)
    text = f"null or {text}" if nullable else text
    return f"{text} ({meta['note']})" if meta.get("note") else text


@dataclass
class Problem:
    """One thing wrong at `key` (dotted): an unknown key (with the valid ones beside it) or a
    bad value (with what it must be)."""

    key: str
    value: Any = None
    must: str = ""               # a bad value: what it must be
    valid: tuple[str, ...] = ()  # an unknown key: its section's keys (dotted, like `key`)

    @property
    def unknown(self) -> bool:
        return not self.must

    def closest(self) -> str:
        """"; did you mean 'x'?" with the valid key nearest to this unknown one, or ""."""
        match = difflib.get_close_matches(self.key, sorted(self.valid), n=1, cutoff=0.6)
        return f"; did you mean '{match[0]}'?" if match else ""

    def __str__(self) -> str:
        if self.unknown:
            return f"{self.key}: unknown key, read by nothing{self.closest()}"
        return f"{self.key}={self.value!r}: must be {self.must}"


# choose(dotted path, the section's value) -> the schema of a section whose schema depends on its
# content (a config group: attention by its name, ...); None leaves the section unchecked.
Chooser = Callable[[str, dict], type | None]


def check(cfg: dict, schema: type, choose: Chooser, prefix: str = "") -> list[Problem]:
    """Every unknown key, wrong type and out-of-range value of `cfg` against `schema`; absent
    keys are not problems (complete() fills them), null is one only where the type forbids it."""
    problems: list[Problem] = []
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = _hints(schema)
    for key, value in cfg.items():
        path = f"{prefix}{key}"
        if key not in fields:
            valid = tuple(prefix + name for name in fields)
            leaves = [f"{path}.{k}" for k in _leaves(value)] if isinstance(value, dict) and value else [path]
            problems += [Problem(leaf, valid=valid) for leaf in leaves]
            continue
        hint, nullable = _optional(hints[key])
        if value is None:
            if not nullable and hint is not Any and fields[key].default is not None:
                problems.append(Problem(path, value, _must(fields[key], hint, nullable)))
            continue
        if dataclasses.is_dataclass(hint):
            if isinstance(value, dict):
                problems += check(value, hint, choose, f"{path}.")
            else:
                problems.append(Problem(path, value, "a section (key: value pairs)"))
            continue
        if hint is Any and isinstance(value, dict):
            if (chosen := choose(path, value)) is not None:
                problems += check(value, chosen, choose, f"{path}.")
            continue
        if (entry := _entry_schema(hint)) is not None and isinstance(value, dict):
            for name, item in value.items():  # dict[str, Schema]: every entry against Schema
                problems += check(item, entry, choose, f"{path}.{name}.") if isinstance(item, dict) \
                    else [Problem(f"{path}.{name}", item, "a section (key: value pairs)")]
            continue
        rule: Rule | None = fields[key].metadata.get("rule")
        try:
            good = _type_ok(value, hint) and (rule is None or rule.test(value))
        except TypeError:
            good = False
        if not good:
            problems.append(Problem(path, value, _must(fields[key], hint, nullable)))
    return problems


def _leaves(cfg: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in cfg.items():
        out += _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) and value else [prefix + key]
    return out


def _resolved(default: Any) -> Any:
    """A default as a resolved config holds it: `${oc.env:VAR,auto}` read now; an interpolation
    of other keys (`${paths.data_dir}/cache`) cannot be outside a config, and stays as it is."""
    if not (isinstance(default, str) and "${" in default):
        return default
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.create({"v": default})["v"]
    except OmegaConfBaseException:
        return default


def complete(cfg: dict, schema: type, choose: Chooser | None = None, prefix: str = "") -> dict:
    """A copy of `cfg` with every key its schema has and it lacks set to the default (a config
    saved by an older version, or written by hand, reads like a composed one); keys it has are
    kept as they are."""
    out = dict(cfg)
    hints = _hints(schema)
    for f in dataclasses.fields(schema):
        hint, _ = _optional(hints[f.name])
        if f.name not in out:
            if (default := _default(f)) is not MISSING:
                out[f.name] = _resolved(default)
            continue
        value = out[f.name]
        if (entry := _entry_schema(hint)) is not None and isinstance(value, dict):
            out[f.name] = {k: complete(v, entry, choose, f"{prefix}{f.name}.{k}.") for k, v in value.items()}
        elif isinstance(value, dict):
            chosen = hint if dataclasses.is_dataclass(hint) else \
                choose(f"{prefix}{f.name}", value) if hint is Any and choose else None
            if chosen is not None:
                out[f.name] = complete(value, chosen, choose, f"{prefix}{f.name}.")
    return out
