"""Rename every committed cell whose directory name is not the fingerprint of its own cell.json
(cells named under an older hash rule) to that fingerprint, and its reruns (verify/,
gallery_runs/) with it, with `git mv`. A maintainer's one-time migration: afterwards every
cell's record hashes to its name (tests/test_cell_identity.py), and the grids still find each
cell by its record, as before. Reports never print cell names, so they rebuild unchanged.

    python maint/name_cells_by_record.py          # list what it would rename
    python maint/name_cells_by_record.py --apply  # rename
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from captioning.errors import ArgumentParser
from captioning.provenance import fingerprint

ROOT = Path(__file__).resolve().parents[1]


def misnamed(results: Path) -> list[tuple[Path, str]]:
    """(cell dir, the name its record hashes to) for every cell not named by its record."""
    out = []
    for record in sorted(results.glob("*/cells/*/cell.json")):
        want = fingerprint(json.loads(record.read_text()))
        if record.parent.name != want:
            out.append((record.parent, want))
    return out


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apply", action="store_true", help="rename (default: list only)")
    args = parser.parse_args()
    moves = misnamed(ROOT / "results")
    for cell, want in moves:
        pairs = [(cell, cell.parent / want)] + [
            (side / cell.name, side / want) for side in (cell.parent.parent / "verify",
                                                          cell.parent.parent / "gallery_runs")
            if (side / cell.name).is_dir()]
        for old, new in pairs:
            if new.exists():
                raise SystemExit(f"{new} exists already: two cells with one record; resolve by hand")
            print(f"{old.relative_to(ROOT)} -> {new.name}")
            if args.apply:
                subprocess.run(["git", "mv", str(old), str(new)], cwd=ROOT, check=True)
    print(f"{len(moves)} cell(s) {'renamed' if args.apply else 'to rename (--apply)'}")


if __name__ == "__main__":
    main()
