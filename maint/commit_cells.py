"""Commit a grid's finished cells that git does not hold yet, one commit a cell, while the grid
trains on: the files .gitignore keeps of a cell (cell.json, results.json, predictions*.json),
with a message made from the cell's own records (what it is, its scores, its cost, the encoder
file it read). A cell whose cell.json does not hash to its folder's name is refused (the rule
of tests/test_cell_identity.py: the grid would not find it again); a cell still training has
no results.json and is not touched.

    python maint/commit_cells.py convergence_learned          # list what it would commit
    python maint/commit_cells.py convergence_learned --apply  # commit each
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from captioning.errors import ArgumentParser
from captioning.provenance import fingerprint

ROOT = Path(__file__).resolve().parents[1]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def uncommitted(root: Path, grid: str) -> list[Path]:
    """The grid's cell folders with a results.json that git does not track yet."""
    found = _git(root, "ls-files", "--others", "--exclude-standard", f"results/{grid}/cells/*/results.json")
    return sorted((root / f).parent for f in found.split())


def misnamed(cell: Path) -> str | None:
    """Why a cell may not be committed under its folder's name, or None."""
    record = cell / "cell.json"
    if not record.is_file():
        return "no cell.json"
    if (want := fingerprint(json.loads(record.read_text()))) != cell.name:
        return f"its cell.json hashes to {want}, not to its folder's name"
    return None


def message(grid: str, cell: Path) -> str:
    """One line from the cell's records: what ran, how it scored, what it cost."""
    c = json.loads((cell / "cell.json").read_text())
    r = json.loads((cell / "results.json").read_text())
    enc = c["encoder"]
    width = f"{enc['pca_dim']}-d" if enc.get("pca_dim") else "all channels"
    what = (f"{c['decoder']['name']}/{c['attention']['name']}, {enc['name']} {width} "
            f"({enc.get('normalize')}), lr {c['optim']['optimizer']['lr']:g}, seed {c['seed']}")
    scores = ", ".join(f"{label} {r[key]:.3f}" for label, key in (
        ("test BLEU-4", "test/bleu4"), ("CIDEr-D", "test/cider"), ("validation", "best_score"))
        if r.get(key) is not None)
    cost = f"{r.get('epochs_trained')} epochs, {r.get('cpu_s', 0):,.0f} CPU s"
    encoder = f", encoder {r['encoder_sha256'][:8]}…" if r.get("encoder_sha256") else ""
    return f"{grid} cell: {what}: {scores}; {cost}{encoder}"


def commit_cells(root: Path, grid: str, apply: bool) -> tuple[list[str], list[str]]:
    """-> (the messages of the cells committed, or to commit without `apply`; the refused, each
    'folder: why')."""
    done, refused = [], []
    for cell in uncommitted(root, grid):
        if why := misnamed(cell):
            refused.append(f"{cell.relative_to(root)}: {why}")
            continue
        text = message(grid, cell)
        if apply:
            rel = str(cell.relative_to(root))
            _git(root, "add", rel)
            _git(root, "commit", "-q", "-m", text, "--", rel)  # this cell only, whatever else is staged
        done.append(text)
    return done, refused


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid", help="the grid's folder under results/ (its compare.name)")
    parser.add_argument("--apply", action="store_true", help="commit (default: list only)")
    args = parser.parse_args()
    if "/" in args.grid or not (ROOT / "results" / args.grid / "cells").is_dir():
        parser.error(f"{args.grid}: no grid of that name under results/ (give the grid's "
                     "compare.name, e.g. convergence_learned)")
    try:
        done, refused = commit_cells(ROOT, args.grid, args.apply)
    except subprocess.CalledProcessError as err:  # not a git checkout, or a commit refused
        why = err.stderr.strip().splitlines()[-1] if err.stderr.strip() else f"exit status {err.returncode}"
        parser.error(f"{' '.join(err.cmd)}: {why}")
    for line in done:
        print(line)
    for line in refused:
        print(f"refused: {line}")
    print(f"{len(done)} cell(s) {'committed' if args.apply else 'to commit (--apply)'}"
          + (f", {len(refused)} refused" if refused else ""))
    if refused:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
