"""Check a command's overrides before Hydra runs it: a mistake Hydra finds while composing (an
option a config group does not have, a key the config lacks, a value of the wrong type, an
override it cannot parse) is one line on stderr, `error: ...`, and exit status 2, like every
other user error (captioning/errors.py), instead of Hydra's search path and exit status 1.
Composing takes ~0.2 s; a sweep (`-m a=x,y`) is checked value by value; the run itself is then
composed by Hydra as usual."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

from .errors import exception_chain, show_traceback
from .paths import conf_dir

MULTIRUN = ("-m", "--multirun")


def _first_line(err: BaseException) -> str:
    return next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)


def message(err: Exception) -> str:
    """Hydra's composition error as one line, naming the override and what to do."""
    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options:
        group, _, value = err.missing_cfg_file.rpartition("/")
        return (f"{group}={value}: {group} has no option {value!r}; "
                f"its options: {', '.join(err.options)}")
    if isinstance(err, OverrideParseException):
        return f"cannot read an override: {_first_line(err)} (Hydra's override syntax: key=value)"
    parts = [" ".join(line.strip() for line in str(err).splitlines() if line.strip())]
    # the causes say why (OmegaConf's: the key a schema lacks, the type a value must have); its
    # message templates ("$VALUE") and Python's own restatement add nothing
    parts += [_first_line(cause) for cause in list(exception_chain(err))[1:]]
    return "; ".join(list(dict.fromkeys(p for p in parts if p and "$" not in p))[:2])


def _variants(args: list[str]) -> Iterator[list[str]]:
    """The single-run override lists a sweep's values make: every swept key at its first value,
    then each further value of one key at a time (not the whole product). Interval sweeps (a
    sweeper's search space) are left to the sweeper."""
    fixed, swept = [], []
    for o in OverridesParser.create().parse_overrides(args):
        if not o.is_sweep_override():
            fixed.append(o.input_line)
        elif o.is_choice_sweep() or o.is_range_sweep():
            swept.append((o.get_key_element(), list(o.sweep_string_iterator())))
    first = [f"{key}={values[0]}" for key, values in swept]
    yield fixed + first
    for i, (key, values) in enumerate(swept):
        for value in values[1:]:
            yield fixed + first[:i] + [f"{key}={value}"] + first[i + 1:]


def check_overrides(config_name: str, args: list[str]) -> None:
    """Compose `config_name` with the command line's overrides; on a composition mistake print
    it as one line and exit with status 2. Other flags (--cfg, --help, ...) are Hydra's own:
    nothing is checked then."""
    multirun = any(a in MULTIRUN for a in args)
    args = [a for a in args if a not in MULTIRUN]
    if any(a.startswith("-") for a in args) or show_traceback():
        return
    try:
        variants = list(_variants(args)) if multirun else [args]
        for overrides in variants:
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
                compose(config_name, overrides=overrides, return_hydra_config=True)
    except (MissingConfigException, ConfigCompositionException, OverrideParseException) as err:
        print(f"error: {message(err)}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        GlobalHydra.instance().clear()


def checked(config_name: str) -> Callable[[Callable], Callable]:
    """Decorate a `@hydra.main` entry point: run from the command line (no arguments), its
    overrides are checked first (`check_overrides`); called with a config, it runs as is."""

    def wrap(entry: Callable) -> Callable:
        @functools.wraps(entry)
        def run(*args, **kwargs):
            if not args and not kwargs:
                check_overrides(config_name, sys.argv[1:])
            return entry(*args, **kwargs)

        return run

    return wrap
