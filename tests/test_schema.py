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
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]
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
    if fn.__name__ == "<lambda>":  # a registry entry with fixed keywords (scaled_dot): its class
        fn = next(c.cell_contents for c in fn.__closure__ if isinstance(c.cell_contents, type))
    params = inspect.signature(fn).parameters
    return {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}


@pytest.mark.parametrize("mode", sorted(schema.ATTENTION))
def test_attention_schema_defaults_equal_the_constructors(mode):
    own = {k: v for k, v in defaults(schema.ATTENTION[mode]).items() if k not in ("name",)}
    ctor = _constructor_defaults(ATTENTIONS[mode])
    assert set(own) <= set(ctor), f"schema keys the constructor does not take: {set(own) - set(ctor)}"
    for key, value in own.items():
        if key == "base_args":  # the base mode's options: its own schema's defaults (ctor: None = those)
            base = defaults(schema.ATTENTION[own["base"]])
            assert ctor[key] is None and all(base[k] == v for k, v in value.items())
        else:
            assert value == ctor[key], f"{mode}.{key}: schema {value!r}, constructor {ctor[key]!r}"


@pytest.mark.parametrize("name", sorted(schema.DECODER))
def test_decoder_schema_defaults_equal_the_constructors(name):
    own = {k: v for k, v in defaults(schema.DECODER[name]).items() if k != "name"}
    assert own == _constructor_defaults(DECODERS[name].__init__)


def test_model_section_defaults_equal_the_refiner_and_media_constructors():
    from captioning.lit.media import ValidationMedia
    from captioning.models.refiner import REFINERS
    from captioning.schema.run import Media

    model = defaults(schema.run.Model)
    ctor = _constructor_defaults(REFINERS["self_attention"])
    assert (model["refiner_layers"], model["refiner_dim"], model["refiner_heads"]) == \
        (ctor["layers"], ctor["dim"], ctor["heads"])
    assert defaults(Media) == _constructor_defaults(ValidationMedia.__init__)


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
    """Hydra types a composed config only through annotations OmegaConf understands."""
    for s in [*schema.ATTENTION.values(), *schema.DECODER.values(), schema.ResNet, schema.Precomputed,
              schema.Synthetic, schema.Karpathy, schema.Train, *schema.ROOT_SCHEMAS.values()]:
        OmegaConf.structured(s)
        assert all(f.type is not dataclasses.MISSING for f in dataclasses.fields(s))


def test_encoder_and_schedule_schema_defaults_equal_their_constructors():
    """The ResNet encoder's and our own schedule's keywords: the schema's defaults are theirs
    (torch's schedules take the schema's values as a preset: their own defaults are torch's)."""
    from captioning.lit.schedules import warmup_cosine
    from captioning.models.encoder import ResNetEncoder, TunableEncoder
    from captioning.schema.run import WarmupCosine

    resnet = defaults(schema.ResNet)
    ctor = _constructor_defaults(ResNetEncoder.__init__)
    assert {k: resnet[k] for k in ctor} == ctor
    tunable = _constructor_defaults(TunableEncoder.__init__)
    assert (resnet["finetune_stages"], "auto") == (tunable["stages"], tunable["precision"])
    cosine = {k: v for k, v in defaults(WarmupCosine).items() if not k.startswith("_")}
    assert cosine == _constructor_defaults(warmup_cosine)


@pytest.mark.parametrize("override", ["compare.executor=debug", "data.format=jsonl",
                                      "encoder=precomputed encoder.path=/x encoder.format=npz"])
def test_allowed_values_come_from_the_code_that_reads_them(override):
    """A set of allowed values has one home, which the reading code imports: every value the
    code accepts passes the check (compare.executor=debug was once refused by a copy of the set)."""
    from captioning.compare.executor import EXECUTORS
    from captioning.data.formats import FORMATS
    from captioning.data.precomputed import FORMATS as FEATURE_FORMATS

    assert EXECUTORS is schema.run.EXECUTORS and FORMATS is schema.data.DATA_FORMATS
    assert FEATURE_FORMATS is schema.model.FEATURE_FORMATS
    data = ["data=karpathy", "data.json_path=/x.json", "data.image_root=/x"] if "data." in override else []
    cfg = _compose("train", ["experiment=cross_modal", *data, *override.split(), "paths.output_dir=x"])
    assert schema_problems(OmegaConf.to_container(cfg, resolve=True)) == []
