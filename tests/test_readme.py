"""Every command-line override the README (and docs/) shows composes: the `python train.py ...`,
`scripts/compare.py`, `scripts/evaluate.py`, `scripts/caption.py` commands in code blocks, and
every `key=value` mentioned in running text (alternatives `a|b|c` each)."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "data" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README = "\n".join(p.read_text() for p in DOCS)
SCRIPTS = {"train.py": "train", "scripts/compare.py": "compare", "scripts/evaluate.py": "evaluate",
           "scripts/caption.py": "caption", "scripts/prepare_data.py": "prepare_data",
           "scripts/gallery.py": "gallery"}
# <run dir>, ..., and a capital letter standing for a number (decode.n_best=N)
PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|^[A-Z]$")


@pytest.fixture(scope="module", autouse=True)
def _hydra():
    """One Hydra initialisation for the whole module (composing is then ~20x cheaper)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        yield
    GlobalHydra.instance().clear()


def _compose(config: str, overrides: list[str]) -> None:
    compose(config, overrides=overrides)


def _commands() -> list[tuple[str, list[str]]]:
    """(config name, override list) of every command in the README's code blocks; a sweep
    (`-m a=x,y`) gives one command per value."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if len(words) < 2 or words[0] != "python" or words[1] not in SCRIPTS:
                continue
            args = [w for w in words[2:] if w != "-m" and "=" in w and not PLACEHOLDER.search(w)]
            sweeps = [[f"{a.split('=')[0]}={v}" for v in a.split("=", 1)[1].split(",")]
                      if "-m" in words and "," in a and "[" not in a else [a] for a in args]
            # Each swept value once (the longest value list sets the count; shorter ones repeat
            # their last value): every value composes, without the whole cartesian product.
            for k in range(max((len(v) for v in sweeps), default=1)):
                combo = [v[min(k, len(v) - 1)] for v in sweeps]
                if (SCRIPTS[words[1]], combo) not in out:
                    out.append((SCRIPTS[words[1]], combo))
    return out


def _inline() -> list[tuple[str, ...]]:
    """The `key=value` words of each inline code span outside code blocks, composed together
    (`decoder=transformer decoder.use_cache=false`); alternatives `a|b` one at a time.
    A word with "nonsense" in it (`attention=nonsense`, `seed=nonsense`) is the docs' example of
    an error, not an override."""
    text = re.sub(r"```.*?```", "", README, flags=re.S)
    found = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        words = [m.groups() for w in re.sub(r"[\"']", " ", span).split()  # ARGS="a=1 b=2": a=1, b=2
                 if (m := re.fullmatch(r"(\+?[a-z_]+(?:\.[a-z_0-9]+)*)=([^()\s]+)", w))
                 and not PLACEHOLDER.search(m.group(2)) and "nonsense" not in w]
        options = [[f"{k}={v}" for v in value.split("|")] for k, value in words]
        found.update(itertools.product(*options) if options else [])
    return sorted(found)


COMMANDS = _commands()
# Inline spans that a command above already composes with the training config are not re-run.
INLINE = [o for o in _inline() if ("train", list(o)) not in COMMANDS]


def test_the_readme_shows_commands_and_overrides():
    assert len(COMMANDS) >= 10 and len(INLINE) >= 10  # the parser found what is there


@pytest.mark.parametrize("config, overrides", COMMANDS, ids=[" ".join(o) for _, o in COMMANDS])
def test_readme_command_composes(config, overrides):
    _compose(config, overrides)


@pytest.mark.parametrize("overrides", INLINE, ids=[" ".join(o) for o in INLINE])
def test_readme_inline_override_composes(overrides):
    """Composes with the training config, or with the script config it belongs to
    (`compare.*` needs an experiment preset; `checkpoint=`/`split=` are evaluate's)."""
    errors = []
    for config, extra in (("train", []), ("train", ["experiment=cross_modal"]), ("evaluate", []),
                          ("caption", []), ("extract_features", ["extract.out=x"])):
        try:
            _compose(config, [*extra, *overrides])
            return
        except Exception as err:  # noqa: BLE001  (collect, report all below)
            errors.append(f"{config}: {type(err).__name__}: {str(err).splitlines()[0]}")
    pytest.fail(f"{' '.join(overrides)} composes with no config:\n" + "\n".join(errors))


def test_a_wrong_key_is_caught():
    """Negative control: a key that does not exist is refused."""
    with pytest.raises(Exception, match="nonexistent"):
        _compose("train", ["decoder.nonexistent=1"])
