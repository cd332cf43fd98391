"""Cells named by an older hash rule: a cell whose directory (today's config hash) does not exist
may have run under a name the config gave before it gained keys or before the hash rule changed.
Such a cell, when it is this config's run, is adopted (renamed to today's hash, its record
rewritten to hash to it) rather than trained again; a finished cell's record is cell.json."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..checkpoint import checkpoint_config, read_checkpoint
from ..provenance import flatten, hashed_view, with_rules
from .lock import CellLock

log = logging.getLogger(__name__)

CELL_CONFIG = "cell.json"  # a cell's hashed config, flat: committed with its results


def cell_config(out: Path, save: bool = False) -> dict | None:
    """A finished cell's hashed config (provenance.hashed_view): from cell.json (committed, so a
    fresh clone can adopt cells after the config gained keys), else from its checkpoint (and
    then, with `save`, written to cell.json)."""
    saved = out / CELL_CONFIG
    if saved.is_file():
        return json.loads(saved.read_text())
    ckpts = [p for name in ("best.ckpt", "last.ckpt") if (p := out / "checkpoints" / name).is_file()]
    if not ckpts:
        return None
    try:
        cfg, _ = checkpoint_config(read_checkpoint(ckpts[0]), ckpts[0])
    except ValueError as err:
        log.warning("grid: cannot read %s (%s); not adopted", ckpts[0], err)
        return None
    view = hashed_view(cfg)
    if save:
        write_cell_config(out, view)
    return view


def write_cell_config(out: Path, view: dict) -> None:
    """The cell's record of its hashed config (provenance.hashed_view), which hashes to its name."""
    (out / CELL_CONFIG).write_text(json.dumps(view, indent=1, sort_keys=True, default=str))


class LegacyCells:
    """The cells under `root` and the `shared` roots that may be adopted; read once."""

    def __init__(self, root: Path, shared: list[Path]) -> None:
        self.root, self.shared = root, shared
        self._legacy: dict[Path, dict] | None = None
        self._warned: set[Path] = set()

    def cells(self) -> dict[Path, dict]:
        """Cells -> their hashed config, flat: the candidates for a cell whose directory
        (today's hash) does not exist, because the config gained keys or the hash rule changed
        since they ran. Finished cells here and in the shared roots, and cells of this root
        killed mid-training (they have a checkpoint: adopted, they resume from it instead of
        starting again). Read once per runner."""
        if self._legacy is None:
            self._legacy = {}
            finished = [c.parent for root in (self.root, *self.shared)
                        for c in sorted((root / "cells").glob("*/results.json"))]
            killed = sorted({c.parent.parent for c in (self.root / "cells").glob("*/checkpoints/*.ckpt")}
                            - set(finished))
            for cell in finished + killed:
                view = cell_config(cell)
                if view is not None:  # a rule it predates is its old value (provenance.RULES)
                    self._legacy[cell] = with_rules(flatten(view))
        return self._legacy

    def adopt(self, plain: dict, out: Path, rename: bool = True) -> Path | None:
        """Rename a legacy cell (here or in a shared root, where it stays) to today's hash when
        it is this config's run: every key it has equals this config's (keys added to the
        config since it ran are taken to keep their old behaviour, as every new key must by
        default, except provenance.RULES: those must equal the cell's recorded or old value, so
        a config under a new rule never adopts a cell of the old one). Renamed, its cell.json
        becomes this config's record, so it still hashes to its name. With rename=False the cell
        is found, not renamed. -> its directory, or None."""
        want = flatten(hashed_view(plain))
        # A content-hashed file absent here (a fresh clone has no trained-encoder weights file)
        # cannot be compared: such a cell is matched on the rest and used, never renamed.
        absent = {k for k, v in want.items() if isinstance(v, str) and v.startswith("absent:")}
        for cell, old in list(self.cells().items()):
            if not all(k in want and (want[k] == v or k in absent) for k, v in old.items()):
                continue
            if any(want[k] != old[k] for k in absent if k in old):
                if cell not in self._warned:
                    self._warned.add(cell)
                    missing = ", ".join(want[k].removeprefix("absent:") for k in absent)
                    log.warning("grid: %s absent here; %s matched on the rest of its config (it "
                                "ran with %s)", missing, cell,
                                ", ".join(str(old[k]) for k in absent if k in old))
                return cell
            if not rename:  # a report reads the cell where it is
                return cell
            lock = CellLock(cell)
            if not (cell / "results.json").exists() and (holder := lock.try_take()) is not None:
                # an older checkout's grid is training it: left there (run() skips it as busy)
                log.warning("grid: %s is this run, being trained by %s; not renamed", cell, holder)
                return cell
            new = cell.parent / out.name
            try:
                cell.rename(new)  # the flock is on the open file, so it holds across the rename
                # its record is now this config's: cell.json hashes to the cell's name again
                write_cell_config(new, hashed_view(plain))
            finally:
                lock.release()
            # Its reruns (the reproducibility check, the gallery's) follow it under the new name.
            for side in ("verify", "gallery_runs"):
                rerun = cell.parent.parent / side / cell.name
                if rerun.is_dir() and not (rerun.parent / new.name).exists():
                    rerun.rename(rerun.parent / new.name)
            del self._legacy[cell]
            log.info("grid: adopted %s as %s (named under an older config: keys added since, "
                     "or an older hash rule)", cell, new.name)
            return new
        return None
