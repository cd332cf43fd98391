"""A grid's encoder file kept in the grid's own record (results/<grid>/encoder/), so that a fresh
clone on any machine resumes the grid with the very file its cells read.

Why: a weights file trained again is another encoder (its bytes are part of every cell's key),
and training it again gives the same bytes only on the CPU kind that made it (floating-point
kernels differ between CPUs). The record holds the file in parts small enough for any git host
(each under 50 MB) and a manifest with the sha256 of every part and of the whole; restoring
checks both before the file is put in place.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import UserError
from ..models.encoder_weights import file_sha256

MANIFEST = "encoder.json"
PART_BYTES = 45 * 2**20  # under the 50 MB at which git hosts start to warn


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def store(weights: Path, folder: Path, want: str | None, part_bytes: int = PART_BYTES) -> dict:
    """Write `weights` into `folder` as parts and a manifest -> the manifest. `want`: the sha256
    the grid pins (encoder.weights_sha256); a file with other bytes is refused, since it is not
    the file the grid's cells read."""
    if not weights.is_file():
        raise UserError(f"{weights}: no such file: store the encoder file the grid's cells read")
    have = file_sha256(weights)
    if want and have != want.lower():
        raise UserError(f"{weights}: its sha256 is {have[:16]}..., not the grid's pin {want[:16]}... "
                        "(encoder.weights_sha256): it is not the file the grid's cells read")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{weights.name}.part*"):  # a file stored before, in other parts
        old.unlink()
    parts = []
    with open(weights, "rb") as f:
        while chunk := f.read(part_bytes):
            name = f"{weights.name}.part{len(parts):02d}"
            (folder / name).write_bytes(chunk)
            parts.append({"name": name, "bytes": len(chunk), "sha256": _sha256_bytes(chunk)})
    manifest = {"file": weights.name, "sha256": have, "bytes": weights.stat().st_size, "parts": parts}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def restore(folder: Path, weights: Path, want: str | None) -> str:
    """Put the file recorded in `folder` at `weights`, every part and the whole checked ->
    what was done, in words. A file already there with the recorded bytes is left as it is; one
    with other bytes is refused (it is someone's other encoder: move it aside first)."""
    if not (folder / MANIFEST).is_file():
        raise UserError(f"{folder}: no encoder file kept there ({MANIFEST}): store it from a machine "
                        "that has it (maint/encoder_record.py store <grid>), or copy the file itself")
    manifest = json.loads((folder / MANIFEST).read_text())
    sha = manifest["sha256"]
    if want and sha != want.lower():
        raise UserError(f"{folder / MANIFEST}: records sha256 {sha[:16]}..., not the grid's pin "
                        f"{want[:16]}... (encoder.weights_sha256): the record and the config disagree")
    if weights.is_file():
        if file_sha256(weights) == sha:
            return f"{weights}: already the recorded file (sha256 {sha[:16]}...)"
        raise UserError(f"{weights}: a file with other bytes than the recorded encoder (sha256 "
                        f"{sha[:16]}...) is there: move it aside and run again, and the record's "
                        "file is put in its place")
    weights.parent.mkdir(parents=True, exist_ok=True)
    tmp = weights.with_name(weights.name + ".restoring")
    whole = hashlib.sha256()  # of what is written, as it is written
    with open(tmp, "wb") as out:
        for part in manifest["parts"]:
            path = folder / part["name"]
            data = path.read_bytes() if path.is_file() else None
            if data is None or _sha256_bytes(data) != part["sha256"]:
                tmp.unlink()
                raise UserError(f"{path}: missing or not the recorded part (sha256 "
                                f"{part['sha256'][:16]}...): check out the grid's record again")
            out.write(data)
            whole.update(data)
    if whole.hexdigest() != sha:  # the parts are right but not in this order or not all listed
        tmp.unlink()
        raise UserError(f"{folder / MANIFEST}: its parts do not make the recorded file: "
                        "the record is damaged")
    os.replace(tmp, weights)  # never a half-written weights file under the real name
    return f"{weights}: restored from {folder} (sha256 {sha[:16]}...)"


def restore_if_recorded(encoder: dict, folder: Path) -> str | None:
    """Before a grid's cells: its pinned encoder file absent here and kept in its record ->
    restore it; what was done, or None (nothing to do). Another file in its place is refused,
    naming the record, rather than overwritten."""
    path, want = encoder.get("weights_path"), encoder.get("weights_sha256")
    if not (encoder.get("pretrained") and path and want and (folder / MANIFEST).is_file()):
        return None
    weights = Path(path).expanduser()
    if weights.is_file() and file_sha256(weights) == want.lower():
        return None  # the pinned file is here already
    return restore(folder, weights, want)  # absent: put in place; other bytes: refused
