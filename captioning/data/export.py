"""Extract once, train many times: a dataset's encoder features, from its feature store, written
in a layout encoder=precomputed reads (data/feature_source.py), so features extracted on one
machine (a GPU) train any number of comparisons elsewhere.

    npy_dir  <out>/<image_id>.npy, each (N, C)
    npz_dir  <out>/<image_id>.npz with `features` (N, C)
    npz      one uncompressed <out>.npz with `ids` (I,) and `features` (I, N, C), written a row
             at a time (never the whole array in memory)

The arrays are the store's rows as they are (float16, N grid cells in row-major order, after the
encoder's global vector where it has one: ViT's class token is row 0), so training on them reads
exactly the features training on the encoder reads. `extract.json` beside them records the
encoder, its weights, the image size and precision they come from, and the command that trains
on them (`encoder.global_first=true` where row 0 is a global vector).
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..errors import UserError
from ..models.encoder_specs import global_first
from ..schema.fields import unset
from .prepare import dataset_features
from .store import write_text_atomic

log = logging.getLogger(__name__)

MANIFEST = "extract.json"


def _save_npy(path: Path, array: np.ndarray, npz: bool) -> None:
    """One image's file, written beside its final name and renamed (a stop leaves no half file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        if npz:
            np.savez(f, features=array)
        else:
            np.save(f, array)
    os.replace(tmp, path)


def _write_npz(path: Path, ids: list[str], rows, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """One uncompressed .npz, its `features` member streamed row by row."""
    tmp = path.with_name(f".{path.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        with zf.open("ids.npy", "w") as f:
            np.lib.format.write_array(f, np.array(ids))
        with zf.open("features.npy", "w", force_zip64=True) as f:
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                      "shape": (len(ids), *shape)}
            np.lib.format.write_array_header_2_0(f, header)
            for row in rows:
                f.write(np.ascontiguousarray(row, dtype=dtype).tobytes())
    os.replace(tmp, path)


def export_features(data_cfg: dict, enc_cfg: dict, extract: dict) -> dict:
    """Extract what the store lacks, then write the chosen splits' usable images in
    `extract.format` under `extract.out`; returns what was written (also in extract.json).
    Per-image files already there are kept (a stopped export continues)."""
    if unset(extract.get("out")):
        raise UserError("extract.out is not set: where to write the features, e.g. "
                        "extract.out=features/<encoder> (a folder; a .npz file for extract.format=npz)")
    if enc_cfg["name"] == "precomputed":
        raise UserError("extract_features: encoder=precomputed has nothing to extract; name the "
                        "encoder to extract with (encoder=resnet50, vit_b_16, ...)")
    located, feats, reasons = dataset_features(data_cfg, enc_cfg)
    splits = set(extract.get("splits") or [])
    rows = [i for i, r in enumerate(located.records) if not splits or r.split in splits]
    unknown = splits - {r.split for r in located.records}
    if unknown:
        raise UserError(f"extract.splits: {sorted(unknown)} not in the dataset (its splits: "
                        f"{sorted({r.split for r in located.records})})")
    skipped = [(str(located.records[i].path), reasons[i]) for i in rows if reasons[i]]
    rows = [i for i in rows if not reasons[i]]
    ids = [str(located.records[i].image_id) for i in rows]
    out, fmt = Path(extract["out"]), extract["format"]
    shape = tuple(feats[0].shape) if len(feats) else ()
    if fmt == "npz":
        out = out if out.suffix == ".npz" else out.with_suffix(".npz")
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_npz(out, ids, (feats[i] for i in tqdm(rows, desc="features", unit="img")), shape,
                   np.dtype(np.float16))
        manifest_path = out.with_name(out.stem + "." + MANIFEST)
    else:
        out.mkdir(parents=True, exist_ok=True)
        suffix = ".npy" if fmt == "npy_dir" else ".npz"
        for i, image_id in zip(tqdm(rows, desc="features", unit="img"), ids):
            target = out / f"{image_id}{suffix}"
            if not target.exists():
                _save_npy(target, np.asarray(feats[i]), npz=fmt == "npz_dir")
        manifest_path = out / MANIFEST
    first = global_first(enc_cfg)
    manifest = {
        "format": fmt, "path": str(out), "images": len(ids), "cells": shape[0] if shape else 0,
        "global_first": first,
        "dim": shape[-1] if shape else 0, "dtype": "float16",
        "encoder": {k: enc_cfg.get(k) for k in ("name", "pretrained", "weights_path", "init_seed",
                                                  "image_size", "precision")},
        "weights": located.encoder.weights_id,
        "splits": sorted(splits) or "all",
        "skipped": [{"image": p, "why": why} for p, why in skipped],
        "train_with": f"encoder=precomputed encoder.path={out} encoder.grid=true"
                      + (" encoder.global_first=true" if first else ""),
    }
    write_text_atomic(manifest_path, json.dumps(manifest, indent=1))
    if skipped:
        log.warning("skipped %d unusable image(s), listed in %s", len(skipped), manifest_path)
    return manifest
