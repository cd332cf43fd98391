"""Installs on the machines users have: `pip install .` (not editable) carries the configs, and
the installed command trains from a directory outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_list_is_the_source_tree():
    """pyproject.toml lists the packages (the configs ride along as captioning.conf): a new
    subpackage missing from the list would be left out of an install."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for top in ("captioning", "hydra_plugins")
             for p in (ROOT / top).rglob("__init__.py")}
    assert listed == found | {"captioning.conf"}


def test_a_plain_install_trains_from_outside_the_checkout(tmp_path):
    """A fresh venv (its dependencies borrowed from this one, so nothing is downloaded), the
    project installed with `pip install .`, then `captioning-train debug=fast` in an empty
    directory: the installed copy's own configs, no checkout on the path."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # A plain path entry: this venv's packages are importable, but its .pth files (the editable
    # install's finder for the checkout) are not run.
    Path(site, "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    build = tmp_path / "src"  # a copy of what a build reads: it must not write into the checkout
    shutil.copytree(ROOT, build, ignore=lambda d, names: [
        n for n in names if n in (".venv", ".git", "outputs", "__pycache__", "build")
        or (Path(d) == ROOT and n in ("data", "results")) or n.endswith(".egg-info")])
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                              "--no-deps", "--no-build-isolation", "--no-index", str(build)],
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(WANDB_MODE="offline", MPLCONFIGDIR=str(tmp_path / "mpl"))
    where = subprocess.run([str(python), "-c", "import captioning.paths as p; print(p.conf_dir())"],
                           capture_output=True, text=True, check=True, cwd=work, env=env).stdout.strip()
    assert where.startswith(site) and where.endswith("captioning/conf"), where
    tiny = ["encoder=resnet18", "encoder.image_size=64", "encoder.num_workers=0",
            "data.synthetic.num_train=48", "data.synthetic.num_val=8", "data.synthetic.num_test=8",
            "data.synthetic.image_size=64", "decoder.embed_dim=32", "decoder.hidden_dim=32",
            "decoder.value_dim=16", "attention.attn_dim=16", "logger=none", "decode.beam_size=1",
            "trainer.enable_progress_bar=false"]
    done = subprocess.run([str(venv / "bin" / "captioning-train"), "debug=fast", *tiny], capture_output=True,
                          text=True, cwd=work, env=env, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    runs = list((work / "outputs" / "debug" / "runs").glob("*/results.json"))
    assert len(runs) == 1 and (runs[0].parent / "train.log").is_file()
