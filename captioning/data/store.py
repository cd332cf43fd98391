"""The feature store: raw encoder features of a dataset on disk, written as they are extracted
and read row by row, so neither extraction nor training ever holds the dataset in RAM.

Layout (one directory per store, named by a fingerprint of everything that determines it):
    features.npy   (rows, N, C) float16, preallocated with np.lib.format.open_memmap
    manifest.json  what the rows are (`spec`: the images, encoder, weights, image size,
                   extraction precision; grid, width, dtype, format version), how they were
                   built (`built`: batch size, machine, torch) and how many are complete
    skipped.json   {row: why} for images that could not be used
    <extra>.npy    per-row side arrays some stores have, written with the rows they belong to
                   (precomputed region features: counts.npy (rows,) regions per row,
                   boxes.npy (rows, N, 4)); the manifest lists them under `extras`

Why one preallocated .npy and not shards: a row's place is fixed before extraction starts, so
a batch is written where it belongs, a reader needs one memory map and no index, and a resumed
build continues at the first row the manifest does not count as done. The manifest is replaced
atomically (temporary file, fsync, rename) only after the rows it counts are flushed to disk, so
a kill -9 at any moment leaves a store whose manifest counts only finished rows.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def write_text_atomic(path: Path, text: str) -> None:
    """`text` into `path` through a temporary file beside it (fsync, rename): a reader sees the
    old file or the new one, and a failed write (a full disk) leaves no half file and raises
    an OSError that names `path`."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from err


def _write_json_atomic(path: Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1))


class StoreChanged(RuntimeError):
    """A store's file was deleted, replaced or shrunk while a run read it."""


class LazyFeatures:
    """Read-only view of a store's features.npy, memory-mapped on first use in each process.
    Pickling sends the path, never a handle or the data, so DataLoader workers (fork or spawn)
    each open their own map. `precision`: the autocast precision the rows were extracted in.

    Every read first checks that the file is still the one mapped (one stat): a map over a file
    that shrank kills the process with SIGBUS when it touches the lost pages, and one over a
    deleted file would outlive it only until the next process opens the path. Either way the
    run stops with StoreChanged, which names the file, instead."""

    def __init__(self, path: Path, shape: tuple[int, ...], precision: str | None = None) -> None:
        self.path, self.shape, self.precision = Path(path), tuple(shape), precision
        self._array: np.ndarray | None = None
        self._file: tuple[int, int] | None = None  # (inode, size) of the file mapped

    def __getstate__(self) -> dict:
        return {"path": self.path, "shape": self.shape, "precision": self.precision, "_array": None,
                "_file": None}

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            st = self._stat()
            self._array = np.load(self.path, mmap_mode="r")
            self._file = (st.st_ino, st.st_size)
        return self._array

    def _stat(self) -> os.stat_result:
        try:
            return os.stat(self.path)
        except FileNotFoundError:
            raise StoreChanged(f"the feature store file {self.path} is gone (deleted or moved "
                               "while the run read it)") from None

    def _check(self) -> None:
        st = self._stat()
        inode, size = self._file
        if st.st_ino != inode:
            raise StoreChanged(f"the feature store file {self.path} was replaced while the run read it")
        if st.st_size < size:
            raise StoreChanged(f"the feature store file {self.path} shrank from {size:,} to "
                               f"{st.st_size:,} bytes while the run read it")

    def __getitem__(self, index):
        array = self.array
        self._check()
        return array[index]

    def __len__(self) -> int:
        return self.shape[0]


def _reserve(path: Path) -> None:
    """Allocate the preallocated file's blocks now: a sparse file that meets a full disk later
    fails where the rows are written through the memory map, with SIGBUS, not an error. A full
    disk is then an OSError here, naming the file and the bytes it needs (and the file is
    removed, so no store is left that a later run would take for a partial build)."""
    size = path.stat().st_size
    try:
        with open(path, "r+b") as f:
            os.posix_fallocate(f.fileno(), 0, size)
    except OSError as err:
        if err.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return  # a file system without fallocate: the writes find out as before
        path.unlink(missing_ok=True)
        fault = OSError(err.errno, err.strerror, str(path))
        fault.needed_bytes = size
        raise fault from err
    except AttributeError:  # no posix_fallocate on this platform
        return


class FeatureStore:
    """A store directory: `open_or_create` it, `write` batches in row order, `finish`."""

    def __init__(self, root: Path, manifest: dict) -> None:
        self.root, self.manifest = Path(root), manifest
        self.features_path = self.root / "features.npy"
        self._map: np.memmap | None = None
        self._skipped: dict[int, str] = {}

    @property
    def rows_done(self) -> int:
        return self.manifest["rows_done"]

    @property
    def complete(self) -> bool:
        return self.rows_done == self.manifest["rows"]

    @classmethod
    def open_or_create(cls, root: Path, spec: dict, rows: int, cells: int, dim: int,
                       built: dict | None = None, extras: dict | None = None) -> FeatureStore:
        """An existing store that matches `spec` (resumed where it stopped), else a new one.
        `spec` = everything that determines the features (encoder, weights, size, images ...);
        `built` = how a new one is made (recorded, not checked); `extras`: {name: (shape,
        dtype name)} side arrays with a row per feature row (`write` fills them alongside)."""
        root = Path(root)
        expected = {"format_version": FORMAT_VERSION, "spec": spec, "rows": rows,
                    "shape": [rows, cells, dim], "dtype": "float16"}
        if extras:  # absent, not empty, in stores without them (their manifests stay valid)
            expected["extras"] = {k: [list(shape), dtype] for k, (shape, dtype) in extras.items()}
        manifest_path = root / "manifest.json"
        if manifest_path.exists():
            try:
                manifest = json.loads(manifest_path.read_text())
                problem = cls._check(root, manifest, expected)
            except (OSError, ValueError) as err:
                manifest, problem = None, f"unreadable manifest ({err})"
            if problem is None:
                store = cls(root, manifest)
                store._skipped = {int(k): v for k, v in
                                  json.loads((root / "skipped.json").read_text()).items()}
                return store
            log.warning("feature store %s does not match (%s): rebuilding it", root, problem)
            for name in ("manifest.json", "features.npy", "skipped.json",
                         *(f"{k}.npy" for k in expected.get("extras", {}))):
                (root / name).unlink(missing_ok=True)
        root.mkdir(parents=True, exist_ok=True)
        np.lib.format.open_memmap(root / "features.npy", mode="w+", dtype=np.float16,
                                  shape=(rows, cells, dim)).flush()
        _reserve(root / "features.npy")
        for name, (shape, dtype) in expected.get("extras", {}).items():
            np.lib.format.open_memmap(root / f"{name}.npy", mode="w+", dtype=dtype,
                                      shape=tuple(shape)).flush()
            _reserve(root / f"{name}.npy")
        store = cls(root, {**expected, "built": built or {}, "rows_done": 0})
        _write_json_atomic(root / "skipped.json", {})
        _write_json_atomic(manifest_path, store.manifest)
        return store

    @staticmethod
    def _check(root: Path, manifest: dict, expected: dict) -> str | None:
        """Why an existing store cannot be used as it is, or None."""
        for key, value in expected.items():
            if manifest.get(key) != value:
                return f"{key} differs"
        if not (root / "skipped.json").exists():
            return "skipped.json is missing"
        rows, cells, dim = expected["shape"]
        try:
            array = np.load(root / "features.npy", mmap_mode="r")
        except (OSError, ValueError) as err:  # a truncated or damaged file fails here
            return f"features.npy cannot be read ({err})"
        if array.shape != (rows, cells, dim) or array.dtype != np.float16:
            return f"features.npy is {array.shape} {array.dtype}"
        for name, (shape, dtype) in expected.get("extras", {}).items():
            try:
                extra = np.load(root / f"{name}.npy", mmap_mode="r")
            except (OSError, ValueError) as err:
                return f"{name}.npy cannot be read ({err})"
            if list(extra.shape) != list(shape) or extra.dtype != np.dtype(dtype):
                return f"{name}.npy is {extra.shape} {extra.dtype}"
        return None

    def write(self, start: int, features: np.ndarray, reasons: list[str],
              extras: dict[str, np.ndarray] | None = None) -> None:
        """Rows start.. of a batch (B, N, C), their skip reasons ("" = fine) and their rows of
        the store's extras; made durable before the manifest counts them."""
        if start != self.rows_done:
            raise ValueError(f"rows must be written in order: expected {self.rows_done}, got {start}")
        if self._map is None:
            self._map = np.load(self.features_path, mmap_mode="r+")
        self._map[start : start + len(features)] = features
        self._map.flush()  # the rows reach the file before the manifest says they exist
        for name, rows in (extras or {}).items():
            side = np.load(self.root / f"{name}.npy", mmap_mode="r+")
            side[start : start + len(rows)] = rows
            side.flush()
            del side
        new = {start + i: why for i, why in enumerate(reasons) if why}
        if new:  # the file on disk already holds every earlier skip
            self._skipped.update(new)
            _write_json_atomic(self.root / "skipped.json", self._skipped)
        self.manifest["rows_done"] = start + len(features)
        _write_json_atomic(self.root / "manifest.json", self.manifest)

    def reasons(self) -> list[str]:
        """Per row "" or why the image was skipped (complete stores only)."""
        return [self._skipped.get(i, "") for i in range(self.manifest["rows"])]

    def features(self) -> LazyFeatures:
        return LazyFeatures(self.features_path, self.manifest["shape"],
                            self.manifest["spec"].get("precision"))

    def extra(self, name: str) -> LazyFeatures | None:
        """A side array (`extras`), memory-mapped like the features; None if the store has none."""
        shape = self.manifest.get("extras", {}).get(name, [None])[0]
        return None if shape is None else LazyFeatures(self.root / f"{name}.npy", shape)


def is_complete(root: Path) -> bool:
    """Whether `root` holds a store whose manifest counts every row done."""
    try:
        manifest = json.loads((Path(root) / "manifest.json").read_text())
        return manifest["rows_done"] == manifest["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def adopt_store(old_root: Path, new_root: Path, old_spec: dict, new_spec: dict) -> bool:
    """Move a store made under an earlier key to its name under today's (no re-extraction): only
    when `old_root`'s manifest holds `old_spec` and nothing is at `new_root` yet. The manifest is
    rewritten first (atomically), then the directory renamed; a kill between the two leaves a
    manifest with `new_spec` under the old name, which the next call renames."""
    old_root, new_root = Path(old_root), Path(new_root)
    if new_root.exists() or not (old_root / "manifest.json").is_file():
        return False
    try:
        manifest = json.loads((old_root / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("spec") == old_spec:
        manifest.update(spec=new_spec, adopted_from={"name": old_root.name, "spec": old_spec})
        _write_json_atomic(old_root / "manifest.json", manifest)
    elif manifest.get("spec") != new_spec:
        return False
    old_root.rename(new_root)
    log.info("features: adopted store %s under its new key as %s (no re-extraction)",
             old_root.name, new_root.name)
    return True
