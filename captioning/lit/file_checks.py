"""What a run config's files and disks say before any work: the encoder's weights present, the
dataset files there, the output directory writable, and room on disk for the checkpoints and,
for the built-in data, the feature store."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..models.encoder_specs import ENCODERS, encoder_dim, feature_rows
from ..models.encoder_weights import weights_problem

FEATURE_BYTES = 2  # per stored feature value (float16)


def _free_bytes(path: Path) -> int:
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _resumed_run(cfg: dict, out: Path) -> tuple[Path, int]:
    """Where the run writes and the bytes of checkpoints already there that it replaces in place:
    resume=<run dir> writes into that run (its last.ckpt and best.ckpt hold room the run keeps),
    a new run into `out`."""
    resume = cfg.get("resume")
    if not resume or resume == "auto":
        return out, 0
    run = Path(resume).expanduser()
    if run.suffix == ".ckpt":
        run = run.parent.parent
    files = [run / "checkpoints" / name for name in ("last.ckpt", "best.ckpt")]
    return (run, sum(f.stat().st_size for f in files if f.is_file())) if run.is_dir() else (out, 0)


def file_problems(cfg: dict, checkpoint_bytes: int) -> list[str]:
    """Weights present, output dir writable, room on disk for checkpoints (and, for the built-in
    dataset, its feature store)."""
    problems = []
    enc = cfg.get("encoder") or {}
    if problem := weights_problem(enc):
        problems.append(problem)
    data = cfg.get("data") or {}
    for key in ("json_path", "split_file"):
        if not data.get("synthetic") and data.get(key) and not Path(data[key]).expanduser().is_file():
            problems.append(f"data.{key}={data[key]}: no such file (data/README.md: where the "
                            "dataset files go)")
    if cfg.get("init_from") and not Path(cfg["init_from"]).expanduser().is_file():
        problems.append(f"init_from={cfg['init_from']}: no such file (a *.ckpt written by train.py)")
    if cfg.get("resume") and cfg.get("init_from"):
        problems.append("resume and init_from together: resume continues a run (its weights "
                        "included); init_from starts a new one from a checkpoint. Pick one.")
    out = Path((cfg.get("paths") or {}).get("output_dir") or ".")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out):
            pass
    except OSError as err:
        problems.append(f"paths.output_dir={out}: not writable ({err.strerror or err}); run from "
                        "a writable directory or set paths.log_dir=/writable/dir")
        return problems
    # last.ckpt + best.ckpt + one temp file while either is rewritten, + 50 MiB of logs.
    need = 3 * checkpoint_bytes + 50 * 2**20
    where, have = _resumed_run(cfg, out)
    if (free := _free_bytes(where)) < need - have:
        problems.append(f"paths.output_dir={where}: {_size(free)} free, the run needs about "
                        f"{_size(need - have)} (3 checkpoints of {_size(checkpoint_bytes)} + logs"
                        + (f", less the {_size(have)} of the checkpoints it replaces)" if have else ")"))
    syn = (cfg.get("data") or {}).get("synthetic")
    if syn and enc.get("name") in ENCODERS and enc.get("image_size"):
        images = syn["num_train"] + syn["num_val"] + syn["num_test"]
        cells = feature_rows(enc["image_size"], enc["name"])
        need = images * cells * encoder_dim(enc["name"]) * FEATURE_BYTES
        cache = Path(cfg["data"].get("cache_dir") or out)
        if (free := _free_bytes(cache)) < need:
            problems.append(f"data.cache_dir={cache}: {_size(free)} free, the feature store of "
                            f"{images} images needs about {_size(need)}")
    return problems
