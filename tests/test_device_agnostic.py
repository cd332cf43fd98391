"""Device correctness by construction: no per-batch code in models/, lit/ or metrics/ makes a
tensor without saying where (a CPU tensor meeting a CUDA one fails on a GPU, never on the CPUs
the tests run on), and nothing names CUDA itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "captioning"
CHECKED = ("models", "lit", "metrics")
# The scripts' decode paths (evaluate.py, caption.py): they run on the device=... asked for.
DECODING_FILES = ("predict.py", "caption_files.py", "evaluation.py")
FACTORIES = {"arange", "zeros", "ones", "full", "empty", "tensor", "as_tensor", "rand", "randn",
             "randint", "randperm", "eye", "linspace", "logspace"}

# "file:function" -> why a factory call there needs no device= (every entry says why).
ALLOWED = {
    "metrics/grounding.py:box_cells": "host-side metric: attention weights are copied to the "
                                      "CPU (lit/module.py) before grounding is scored",
}


def problems(source: str, where: str) -> list[str]:
    """Factory calls without device= and CUDA names in every function but constructors."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name == "__init__":
            continue  # constructors: buffers and parameters move with the module
        if f"{where}:{fn.name}" in ALLOWED:
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func
                if (target.attr in FACTORIES and isinstance(target.value, ast.Name)
                        and target.value.id == "torch"
                        and not any(k.arg == "device" for k in node.keywords)):
                    found.append(f"{where}:{node.lineno} {fn.name}: torch.{target.attr}(...) "
                                 "without device=")
                if target.attr == "cuda" and not node.args and not node.keywords:
                    found.append(f"{where}:{node.lineno} {fn.name}: .cuda()")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value == "cuda" or node.value.startswith("cuda:")):
                found.append(f"{where}:{node.lineno} {fn.name}: hard-coded {node.value!r}")
    return found


def test_no_tensor_is_made_without_a_device():
    files = [p for pkg in CHECKED for p in sorted((PACKAGE / pkg).rglob("*.py"))]
    files += [PACKAGE / f for f in DECODING_FILES]
    assert len(files) > 20
    found = [x for p in files for x in problems(p.read_text(), str(p.relative_to(PACKAGE)))]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("planted, caught", [
    ("def step(x):\n    return x + torch.arange(x.shape[0])\n", True),
    ("def step(x):\n    return x + torch.arange(x.shape[0], device=x.device)\n", False),
    ("def step(x):\n    return x.cuda()\n", True),
    ("def step(x):\n    return x.to('cuda')\n", True),
    ("class M:\n    def __init__(self):\n        self.b = torch.zeros(3)\n", False),
])
def test_the_check_catches_a_planted_mistake(planted, caught):
    assert bool(problems(planted, "models/planted.py")) == caught
