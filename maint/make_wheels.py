"""Fill wheels/ with what maint/gpu_check.sh may have to install on a GPU machine that has
Python, PyTorch and pytorch-lightning but no internet: `make wheels TARGET_PY=3.12 TARGET_TORCH=2.11`.

Only what the check imports (no wandb, TensorBoard, matplotlib or the Java-based metrics);
versions from requirements.lock, except torchvision, which must match the target's torch
(torchvision 0.(N+15) goes with torch 2.N). Binary wheels for manylinux x86_64 and the target's
Python; pure-Python packages published only as source (antlr4) are built into wheels here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from captioning.errors import ArgumentParser, UserError, report_user_errors

ROOT = Path(__file__).resolve().parents[1]
# What gpu_check.sh needs beyond torch and pytorch-lightning (import name in gpu_check.sh).
PACKAGES = ["hydra-core", "omegaconf", "antlr4-python3-runtime", "nltk", "regex", "click", "joblib",
            "PyYAML", "tqdm", "pillow", "numpy"]
SOURCE_ONLY = {"antlr4-python3-runtime"}
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def pinned(name: str) -> str:
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.lower().startswith(name.lower() + "=="):
            return line.strip()
    raise UserError(f"{name} is not pinned in requirements.lock")


def torchvision_for(torch_version: str) -> str:
    major, minor = (int(x) for x in torch_version.split(".")[:2])
    if major != 2:
        raise UserError(f"torch {torch_version}: only torch 2.x is mapped to a torchvision")
    return f"torchvision==0.{minor + 15}.*"


@report_user_errors  # a bad argument or file: one line on stderr, exit status 2
def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="3.12", help="the GPU machine's Python (major.minor)")
    parser.add_argument("--torch", default="2.11", help="the GPU machine's torch (major.minor)")
    parser.add_argument("--dest", default=str(ROOT / "wheels"))
    args = parser.parse_args()
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    binary = [pinned(p) for p in PACKAGES if p not in SOURCE_ONLY] + [torchvision_for(args.torch)]
    platforms = [x for p in PLATFORMS for x in ("--platform", p)]
    subprocess.run([*pip, "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", args.python, "--implementation", "cp", *platforms,
                    "-d", str(dest), *binary], check=True)
    subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "-w", str(dest),
                    *[pinned(p) for p in SOURCE_ONLY]], check=True)
    size = sum(f.stat().st_size for f in dest.glob("*.whl"))
    print(f"{len(list(dest.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB in {dest} "
          f"(Python {args.python}, torch {args.torch})")


if __name__ == "__main__":
    main()
