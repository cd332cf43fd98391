"""The config schemas (captioning/schema/): every yaml under conf/ validates against its schema,
every schema default equals its constructor's, and the checks find what they are for."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from captioning import schema
from captioning.lit.config_check import schema_problems
from captioning.models import DECODERS
from captioning.models.attention import ATTENTIONS
from captioning.schema.fields import defaults

CONF = Path(__file__).resolve().parents[1] / "conf"
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")
OPTIONS = sorted({(g, p.stem) for g in GROUPS for p in (CONF / g).glob("*.yaml")} |
                 {(g, name) for g, options in schema.DERIVED_GROUPS.items() for name in options})
NEEDS = {("encoder", "precomputed"): ["encoder.path=/x"], ("training", "scst"): ["init_from=/x.ckpt"]}


def _compose(config: str, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config, overrides=overrides)


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes_typed_and_passes_its_schema(group, option):
    """Each yaml composes over its schema (Hydra types it) and the plain result has no unknown
    key, wrong type or out-of-range value (real-data presets: their files are the user's)."""
    extra = NEEDS.get((group, option), [])
    if group == "data" and option != "synthetic":
        extra = ["data.json_path=/x.json", "data.image_root=/x"]
    cfg = _compose("train", [f"{group}={option}", *extra, "paths.output_dir=x"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    for section in ("attention", "decoder", "encoder", "data", "trainer"):
        assert OmegaConf.get_type(cfg[section]) is not dict, f"{section} is not typed by a schema"
    assert schema_problems(plain) == []  # Trainer arguments beyond the schema's: by its signature


@pytest.mark.parametrize("config", ["evaluate", "caption", "gallery", "prepare_data", "compare"])
def test_the_other_entry_points_compose_over_their_schemas(config):
    overrides = {"evaluate": ["checkpoint=x"], "caption": ["checkpoint=x", "image=y"],
                 "gallery": ["runs=[a]"]}.get(config, [])
    cfg = _compose(config, overrides)
    assert OmegaConf.get_type(cfg) in set(schema.ROOT_SCHEMAS.values())


def test_yamls_hold_no_value_equal_to_their_schemas_default():
    """One home per default: an option's yaml sets only what differs from its schema."""
    repeated = []
    for group, options in schema.GROUP_SCHEMAS.items():
        for path in sorted((CONF / group).glob("*.yaml")):
            raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            raw.pop("defaults", None)
            body = raw.get(group, raw) if path.read_text().lstrip().startswith("# @package _global_") else raw
            for key, value in body.items() if isinstance(body, dict) else []:
                for s in options.values():
                    d = defaults(s)
                    if key in d and d[key] == value and key != "name" and path.stem in str(s).lower():
                        repeated.append(f"{path.relative_to(CONF)}: {key}")
    assert repeated == []


def _constructor_defaults(fn) -> dict:
    params = inspect.signature(fn).parameters
    return {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}


def _pairs() -> list[tuple[str, type, object, dict[str, str]]]:
    """(label, schema, constructor, {schema key: constructor keyword}) for every schema whose
    settings a constructor takes (the key map where the names differ)."""
    from captioning.lit.media import ValidationMedia
    from captioning.lit.schedules import WarmupPlateau, warmup_cosine
    from captioning.models.encoder import ResNetEncoder, TunableEncoder
    from captioning.models.refiner import REFINERS
    from captioning.schema.run import Media, WarmupCosine
    from captioning.schema.run import WarmupPlateau as WarmupPlateauSchema

    same = lambda s: {f.name: f.name for f in dataclasses.fields(s)}  # noqa: E731
    pairs = [(f"attention={m}", schema.ATTENTION[m], ATTENTIONS.target(m), same(schema.ATTENTION[m]))
             for m in ATTENTIONS]
    pairs += [(f"decoder={d}", schema.DECODER[d], DECODERS.target(d), same(schema.DECODER[d]))
              for d in DECODERS]
    refiner = {"refiner_layers": "layers", "refiner_dim": "dim", "refiner_heads": "heads"}
    pairs += [(f"model.refiner={r}", schema.run.Model, REFINERS.target(r), refiner) for r in REFINERS]
    pairs += [("encoder (frozen)", schema.ResNet, ResNetEncoder, same(schema.ResNet)),
              ("encoder (fine-tuned)", schema.ResNet, TunableEncoder,
               {"finetune_stages": "stages", "precision": "precision"}),
              ("media", Media, ValidationMedia, same(Media)),
              ("schedule=warmup_cosine", WarmupCosine, warmup_cosine, same(WarmupCosine)),
              ("schedule=warmup_plateau", WarmupPlateauSchema, WarmupPlateau, same(WarmupPlateauSchema))]
    return pairs


def _written_twice(pairs) -> list[str]:
    twice = []
    for label, s, ctor, keys in pairs:
        own = _constructor_defaults(ctor.__init__ if isinstance(ctor, type) else ctor)
        derived = getattr(s, "__derived_from__", None) is ctor
        for key, default in defaults(s).items():
            if key not in keys or keys[key] not in own:
                continue
            if derived:  # the constructor's default is the schema's, by construction
                assert default == (dict(own[key]) if isinstance(default, dict) else own[key])
            else:
                twice.append(f"{label}: {key} (schema {default!r}, constructor {own[keys[key]]!r})")
    return twice


def test_every_default_is_written_once():
    """A setting's default lives in its schema or in its constructor, never in both: a schema
    derived from its constructor (attention modes, decoders) takes the constructor's, and a
    constructor beside a written schema takes the value it is given."""
    assert _written_twice(_pairs()) == []


def test_the_default_check_sees_a_default_written_twice():
    """The control: a written schema beside a constructor with a default of its own is found,
    and the same constructor with its schema derived from it is not."""
    from captioning.schema.fields import from_signature

    @dataclasses.dataclass
    class Written:
        width: int = 8

    def build(width: int = 8, depth: int = 2) -> None: ...

    assert _written_twice([("planted", Written, build, {"width": "width"})]) == \
        ["planted: width (schema 8, constructor 8)"]
    derived = from_signature("planted", build)
    assert defaults(derived) == {"name": "planted", "width": 8, "depth": 2}
    assert _written_twice([("planted", derived, build, {"width": "width", "depth": "depth"})]) == []


def test_every_registry_is_covered():
    """Every registry of components whose settings are config keys has its schemas in the walk."""
    from captioning.models.refiner import REFINERS

    labels = {label for label, *_ in _pairs()}
    assert {f"attention={m}" for m in ATTENTIONS} | {f"decoder={d}" for d in DECODERS} | \
        {f"model.refiner={r}" for r in REFINERS} <= labels


def test_check_finds_unknown_keys_types_and_ranges_with_the_nearest_key():
    cfg = OmegaConf.to_container(_compose("train", ["paths.output_dir=x"]), resolve=True)
    cfg["decode"]["beam_size"] = 0
    cfg["decode"]["alpha"] = "high"
    cfg["attention"]["atn_dim"] = 5
    cfg["data"]["synthetic"]["num_trian"] = 3
    found = sorted(str(p) for p in schema.problems(cfg))
    assert found == [
        "attention.atn_dim: unknown key, read by nothing; did you mean 'attention.attn_dim'?",
        "data.synthetic.num_trian: unknown key, read by nothing; did you mean 'data.synthetic.num_train'?",
        "decode.alpha='high': must be >= 0 (0 ranks by log-probability)",
        "decode.beam_size=0: must be an integer >= 1 (1 = greedy)",
    ]


def test_completed_fills_what_an_older_config_lacks_and_keeps_the_rest():
    cfg = OmegaConf.to_container(_compose("train", ["paths.output_dir=x"]), resolve=True)
    old = {**cfg, "decode": {"beam_size": 3, "max_len": 20, "alpha": 0.5, "block_ngram": 0}}
    del old["media"]
    new = schema.completed(old)
    assert new["decode"] == {**defaults(schema.run.Decode), "beam_size": 3, "max_len": 20, "alpha": 0.5}
    assert new["media"] == defaults(schema.run.Media)
    assert {k: v for k, v in new.items() if k not in ("decode", "media")} == \
        {k: v for k, v in cfg.items() if k not in ("decode", "media")}


def test_every_field_is_typed_for_hydra():
    """Hydra types a composed config only through annotations OmegaConf understands (the
    derived schemas too: a constructor's annotation must be one)."""
    for s in [*schema.ATTENTION.values(), *schema.DECODER.values(), schema.ResNet, schema.Precomputed,
              schema.Synthetic, schema.Karpathy, schema.Train, *schema.ROOT_SCHEMAS.values()]:
        OmegaConf.structured(s)
        assert all(f.type is not dataclasses.MISSING for f in dataclasses.fields(s))


@pytest.mark.parametrize("override", ["compare.executor=debug", "data.format=jsonl",
                                      "encoder=precomputed encoder.path=/x encoder.format=npz"])
def test_allowed_values_come_from_the_code_that_reads_them(override):
    """A set of allowed values has one home, which the reading code imports: every value the
    code accepts passes the check (compare.executor=debug was once refused by a copy of the set)."""
    from captioning.compare.executor import EXECUTORS
    from captioning.data.feature_source import FORMATS as FEATURE_FORMATS
    from captioning.data.formats import FORMATS

    assert EXECUTORS is schema.compare.EXECUTORS and FORMATS is schema.data.DATA_FORMATS
    assert FEATURE_FORMATS is schema.model.FEATURE_FORMATS
    data = ["data=karpathy", "data.json_path=/x.json", "data.image_root=/x"] if "data." in override else []
    cfg = _compose("train", ["experiment=cross_modal", *data, *override.split(), "paths.output_dir=x"])
    assert schema_problems(OmegaConf.to_container(cfg, resolve=True)) == []
