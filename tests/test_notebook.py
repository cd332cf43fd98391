"""examples/attention_bench.ipynb runs as written: executed here on two small checkpoints of its
own (additive and dot) and the built-in images, so a change to the Python API that breaks the
notebook fails the suite instead of the reader."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from captioning.lit import train

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "attention_bench.ipynb"


def _checkpoint(root: Path, data: Path, attention: str) -> Path:
    from conftest import TINY, compose_cfg, shrink

    cfg = shrink(compose_cfg(TINY + [f"attention={attention}", "trainer.max_epochs=1", "decode.beam_size=1"],
                             root / attention, data))
    train(cfg)
    return Path(cfg.paths.output_dir) / "checkpoints" / "best.ckpt"


def _parameters(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    return cell


@pytest.fixture(scope="module")
def executed(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("notebook")
    data = data_dir  # the suite's tiny dataset, made once
    checkpoints = [_checkpoint(root, data, a) for a in ("additive", "dot")]
    images = sorted(str(p) for p in data.glob("synthetic/*/images/*.png"))[:3]
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # as papermill does: the cell tagged `parameters` gets this test's values
    values = {"CHECKPOINTS": [str(c) for c in checkpoints], "IMAGES": images, "DEVICE": "cpu"}
    _parameters(nb).source += "".join(f"\n{k} = {v!r}" for k, v in values.items())
    os.environ.setdefault("MPLCONFIGDIR", str(root / "mpl"))  # the kernel inherits this environment
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(Path(__file__).resolve().parents[1])}})
    client.execute()
    if os.environ.get("CAPTIONING_KEEP_NOTEBOOK"):  # to read what the notebook showed
        nbformat.write(nb, os.environ["CAPTIONING_KEEP_NOTEBOOK"])
    return nb


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_every_cell_runs_and_prints_what_it_promises(executed):
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code)  # every cell ran (an error stops execute())
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    captions = _text(code[1]).splitlines()
    assert len(captions) == 3 and all(": " in line and line.split(": ", 1)[1] for line in captions)
    nbest = _text(code[4]).splitlines()
    assert len(nbest) == 3  # beam 5, three best
    compared = _text(code[5])
    assert "additive:" in compared and "dot:" in compared
    figures = [c for c in code if any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert len(figures) == 3  # the maps, the caption figure, the two checkpoints side by side


def test_the_notebook_is_committed_without_outputs():
    """Outputs belong to the reader's run; a committed one would show another machine's captions."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") and not c.get("execution_count") for c in code)
