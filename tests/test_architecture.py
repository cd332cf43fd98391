"""The import order between the packages (docs/architecture.md), read from the source."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "captioning"

# Lower layers never import higher ones; a layer may import itself and anything below.
LAYERS = {
    "provenance": 0,  # fingerprints and the code version: standard library only
    "errors": 0,  # UserError and the command-line wrapper: standard library only
    "rules": 0,  # a setting's allowed range (schemas and constructors): standard library only
    "paths": 0,  # where the configs are (installed or a checkout): standard library only
    "compose_check": 1,  # a command line's overrides composed before Hydra runs it: hydra only
    "device": 1,  # which device a setting names: torch only (the CPU settings: models/cpu_speed)
    "models": 1,  # torch / torchvision only
    "schema": 2,  # every setting's default, type and range (attention's: from the constructors)
    "data": 3,  # readers, feature cache, vocabulary (uses models: encoder, normaliser)
    "metrics": 4,  # scores words (uses data: the tokenizer, the built-in lexicon)
    "visualize": 4,
    "benchmark": 4,  # torch-only speed measurements (uses models, data's image loader)
    "checkpoint": 5,
    "predict": 6,
    "evaluation": 7,
    "inference": 7,  # ImageCaptioner: images in, captions and attention maps out (uses predict)
    "caption_files": 8,  # scripts/caption.py's files and figures (uses inference)
    "gallery": 8,  # runs side by side as a web page (uses evaluation's decoding and the metrics)
    "lit": 8,  # the only layer that imports pytorch_lightning
    "compare": 9,
    "cli": 10,  # the training command (train.py, captioning-train, python -m captioning)
    "__main__": 11,  # python -m captioning: the training command
}


# Edges the layer order would allow but the design forbids: (importer, imported) -> why.
FORBIDDEN = {
    ("metrics", "models"): "metrics score numbers and words and know no model: pass the numbers in",
}


def _imports(path: Path, parts: list[str] | None = None) -> list[tuple[str, int]]:
    """(absolute module name, line) of every import in a file of the package (`parts`: its
    module path, for a file that is not inside the package)."""
    parts = parts or list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = parts[:-1]  # what a relative import is relative to (also for __init__.py)
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((name, node.lineno))
    return out


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "captioning" and len(parts) > 1 else None


def test_no_package_imports_a_layer_above_it():
    assert set(LAYERS) == {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or
                           (p.is_dir() and (p / "__init__.py").exists())} - {"__init__"}
    bad = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "__init__.py":  # the package root: a lazy load_checkpoint only
            continue
        own = _layer(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        for name, line in _imports(path):
            other = _layer(name)
            if own and other and other != own and LAYERS[other] >= LAYERS[own]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({own}) imports {name}")
            if (own, other) in FORBIDDEN:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({own}) imports {name}: "
                           f"{FORBIDDEN[(own, other)]}")
            if name.split(".")[0] in ("pytorch_lightning", "lightning") and own != "lit":
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports Lightning outside lit/")
    assert not bad, "\n".join(bad)


def test_models_import_torch_and_the_standard_library_only():
    """And captioning.rules (a setting's allowed range, on the constructors' keywords)."""
    # open_clip and safetensors: imported only when a CLIP tower is built (models/clip_tower.py,
    # the optional [clip] extra); the run-time check below shows importing the models loads neither
    optional = {"open_clip", "safetensors"}
    allowed = {"torch", "torchvision", "__future__"} | optional | set(sys.stdlib_module_names)
    bad = [f"{p.relative_to(PACKAGE.parent)}:{line} imports {name}"
           for p in (PACKAGE / "models").rglob("*.py") for name, line in _imports(p)
           if name.split(".")[0] not in allowed
           and not name.startswith(("captioning.models", "captioning.rules"))]
    assert not bad, "\n".join(bad)
    # And at run time: importing the models loads no other part of the project.
    code = ("import sys, captioning.models; "
            "print(sorted(m for m in sys.modules if m.startswith(('captioning.', *" + repr(optional) + ")) "
            "and not m.startswith('captioning.models')))")  # rules: standard library only
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['captioning.rules']"


def test_the_checker_sees_a_violation(tmp_path):
    """Negative control: a models file importing lit would be reported (the file is read from a
    tmp dir as if it were captioning/models/_violation.py: nothing is written into the package)."""
    fake = tmp_path / "_violation.py"
    fake.write_text("from ..lit import train\nimport hydra\n")
    names = [n for n, _ in _imports(fake, ["captioning", "models", "_violation"])]
    assert names == ["captioning.lit", "hydra"]
    assert LAYERS[_layer(names[0])] > LAYERS["models"]
    # and a metrics file importing a model, which the layer order alone would allow
    fake.write_text("from ..models.attention import sentinel_weight\n")
    (name,) = [n for n, _ in _imports(fake, ["captioning", "metrics", "_violation"])]
    assert LAYERS[_layer(name)] < LAYERS["metrics"] and ("metrics", _layer(name)) in FORBIDDEN
