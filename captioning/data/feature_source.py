"""Where precomputed features come from (encoder=precomputed): per-image arrays by image id in
one of three layouts, read a header or an image at a time, never whole (data/precomputed.py
copies them into a feature store).

Formats (`encoder.format`; auto picks one from what `encoder.path` is):
  npy_dir  a folder of <image_id>.npy, each (N, C): N regions or grid cells of width C; boxes,
           if any, in `encoder.boxes_path`, a folder of <image_id>.npy (N, 4).
  npz_dir  a folder of <image_id>.npz holding `features_key` (N, C) and, if present,
           `boxes_key` (N, 4) (or boxes in `encoder.boxes_path`, as bottom-up feature folders
           keep them).
  npz      one .npz written by np.savez (uncompressed: its members are memory-mapped, never
           read whole) with `ids` (I,), `features_key` (I, N, C), or ragged (sum of N, C) with
           `counts` (I,), and optionally `boxes_key` laid out like the features, 4 wide.
Why these three: numpy reads them with nothing to install; one file per image is what feature
extraction scripts write; one uncompressed .npz maps without a copy. HDF5 needs h5py, which is
not a dependency; docs/precomputed_features.md converts one in a short loop.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..provenance import fingerprint
from ..schema.fields import unset
from ..schema.model import FEATURE_FORMATS

FORMATS = FEATURE_FORMATS  # encoder.format's values besides auto (their home: the schema)


def _npy_header(f) -> tuple[tuple[int, ...], np.dtype, int, bool]:
    """(shape, dtype, offset of the data, Fortran order) of the .npy whose header starts at
    f's position."""
    start = f.tell()
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    return shape, dtype, f.tell() - start, fortran


class Source:
    """Per-image arrays by id, in one of FORMATS: `ids`, `shape(id)` (reads a header only),
    `read(id)` -> (features (N, C), boxes (N, 4) or None), `where(id)` (for messages)."""

    def __init__(self, enc: dict) -> None:
        if unset(enc["path"]):
            raise UserError("encoder=precomputed needs encoder.path=<a folder of <image_id>.npy or "
                            ".npz files, or one .npz file> (docs/precomputed_features.md)")
        self.path = Path(enc["path"]).expanduser()
        if not self.path.exists():
            raise UserError(f"encoder.path={self.path}: no such file or folder")
        fmt = enc.get("format") or "auto"
        if fmt == "auto":
            fmt = "npz" if self.path.is_file() else (
                "npz_dir" if next(self.path.glob("*.npz"), None) else "npy_dir")
        if fmt not in FORMATS:
            raise UserError(f"encoder.format={fmt!r}: must be auto or one of {', '.join(FORMATS)}")
        self.format, self.features_key = fmt, enc.get("features_key") or "features"
        self.boxes_key = enc.get("boxes_key")
        self.boxes_path = Path(enc["boxes_path"]).expanduser() if enc.get("boxes_path") else None
        if self.boxes_path is not None and not self.boxes_path.is_dir():
            raise UserError(f"encoder.boxes_path={self.boxes_path}: not a folder of <image_id>.npy boxes")
        if fmt == "npz":
            self._open_file()
        else:
            if not self.path.is_dir():
                raise UserError(f"encoder.path={self.path} is a file; encoder.format={fmt} reads a folder")
            suffix = ".npy" if fmt == "npy_dir" else ".npz"
            self.files = {p.name[: -len(suffix)]: Path(p.path) for p in os.scandir(self.path)
                          if p.name.endswith(suffix)}
            if not self.files:
                raise UserError(f"encoder.path={self.path}: no *{suffix} files (encoder.format={fmt})")
            self.ids = set(self.files)

    # -- one .npz file -----------------------------------------------------------------------
    def _member(self, name: str) -> np.ndarray | None:
        """Member `name` of the .npz, memory-mapped (None if absent); compressed members are
        refused (reading them means decompressing the whole array into RAM)."""
        info = self._zip.NameToInfo.get(f"{name}.npy")
        if info is None:
            return None
        if info.compress_type != zipfile.ZIP_STORED:
            raise UserError(f"encoder.path={self.path}: member {name!r} is compressed (np.savez_compressed); "
                            "write it with np.savez (uncompressed, so it can be memory-mapped) or "
                            "use a folder of per-image files")
        with open(self.path, "rb") as f:
            f.seek(info.header_offset)
            local = f.read(30)  # the zip local file header: name and extra lengths at 26..30
            f.seek(info.header_offset + 30 + int.from_bytes(local[26:28], "little")
                   + int.from_bytes(local[28:30], "little"))
            start = f.tell()
            shape, dtype, header, fortran = _npy_header(f)
        return np.memmap(self.path, dtype=dtype, mode="r", offset=start + header, shape=shape,
                         order="F" if fortran else "C")

    def _open_file(self) -> None:
        try:
            self._zip = zipfile.ZipFile(self.path)
        except zipfile.BadZipFile:
            raise UserError(f"encoder.path={self.path}: not an .npz file (encoder.format=npz)") from None
        ids, feats = self._member("ids"), self._member(self.features_key)
        if ids is None or feats is None:
            raise UserError(f"encoder.path={self.path}: needs arrays 'ids' and {self.features_key!r} "
                            f"(has {', '.join(n[:-4] for n in self._zip.namelist())}); "
                            "see encoder.features_key")
        names = [str(i) for i in np.asarray(ids).tolist()]
        if len(set(names)) != len(names):
            raise UserError(f"encoder.path={self.path}: 'ids' repeats ids; each image once")
        counts = self._member("counts")
        if counts is None:
            if feats.ndim != 3 or len(feats) != len(names):
                raise UserError(f"encoder.path={self.path}: {self.features_key!r} is {feats.shape}; with "
                                f"{len(names)} ids it must be ({len(names)}, N, C), or (sum of N, C) "
                                "with a 'counts' array")
            self._spans = {n: (k, None) for k, n in enumerate(names)}
        else:
            counts = np.asarray(counts, dtype=np.int64)
            if len(counts) != len(names) or feats.ndim != 2 or counts.sum() != len(feats):
                raise UserError(f"encoder.path={self.path}: 'counts' ({counts.shape}, sum "
                                f"{counts.sum()}) does not match 'ids' ({len(names)}) and "
                                f"{self.features_key!r} {feats.shape}")
            starts = np.concatenate([[0], np.cumsum(counts)])
            self._spans = {n: (int(starts[k]), int(starts[k + 1])) for k, n in enumerate(names)}
        self._feats = feats
        self._boxes = self._member(self.boxes_key) if self.boxes_key else None
        self.ids = set(names)

    # -- every format ---------------------------------------------------------------------------
    def where(self, image_id: str) -> str:
        return str(self.files[image_id]) if self.format != "npz" else f"{self.path}[{image_id}]"

    def box_where(self, image_id: str) -> str:
        """The file that holds an image's boxes (for messages about them)."""
        if self.boxes_path is not None:
            return str(self.boxes_path / f"{image_id}.npy")
        return f"{self.where(image_id)} (array {self.boxes_key!r})"

    def shape(self, image_id: str) -> tuple[int, ...]:
        if self.format == "npz":
            a, b = self._spans[image_id]
            return self._feats.shape[1:] if b is None else (b - a, self._feats.shape[1])
        with open(self.files[image_id], "rb") as f:
            if self.format == "npy_dir":
                return _npy_header(f)[0]
        with zipfile.ZipFile(self.files[image_id]) as z, z.open(f"{self.features_key}.npy") as f:
            return _npy_header(f)[0]

    def read(self, image_id: str) -> tuple[np.ndarray, np.ndarray | None]:
        boxes = None
        if self.format == "npz":
            a, b = self._spans[image_id]
            feats = self._feats[a] if b is None else self._feats[a:b]
            if self._boxes is not None:
                boxes = self._boxes[a] if b is None else self._boxes[a:b]
        elif self.format == "npy_dir":
            feats = np.load(self.files[image_id])
        else:
            with np.load(self.files[image_id]) as z:
                feats = z[self.features_key]
                if self.boxes_key and self.boxes_key in z.files:
                    boxes = z[self.boxes_key]
        if self.boxes_path is not None:
            boxes = np.load(self.boxes_path / f"{image_id}.npy")
        return np.asarray(feats), None if boxes is None else np.asarray(boxes)

    @property
    def has_boxes(self) -> bool:
        if self.boxes_path is not None:
            return True
        if self.format == "npz":
            return self._boxes is not None
        if self.format == "npz_dir" and self.boxes_key:
            with np.load(next(iter(self.files.values()))) as z:
                return self.boxes_key in z.files
        return False

    def key(self, ids: list[str]) -> str:
        """What the store is keyed by: the files the rows come from (name and size, so a
        replaced file is noticed), or the one file's size and mtime, and the arrays read."""
        if self.format == "npz":
            st = self.path.stat()
            items = [self.path.name, st.st_size, st.st_mtime_ns]
        else:
            items = [[i, self.files[i].stat().st_size] if i in self.files else [i, None] for i in ids]
        boxes = [self.boxes_path.name if self.boxes_path else None, self.boxes_key]
        return fingerprint([self.format, self.features_key, boxes, items])
