"""Write requirements.lock: the versions installed in this environment of exactly the packages
the project needs (its dependencies and the dev and cluster extras, and theirs, recursively),
nothing else that happens to be installed.

    .venv/bin/python maint/lock_requirements.py            # rewrite requirements.lock
    .venv/bin/python maint/lock_requirements.py --check    # exit 2 if it would change

Run it in the venv `make install` built, after changing a dependency in pyproject.toml and
testing the new versions (`pip install -U <pkg>`, `make test`).
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

from captioning.errors import ArgumentParser, UserError, report_user_errors

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("dev", "cluster", "clip")
HEADER = ("# Pinned, tested versions (pip constraints for `make install`): the project's\n"
          "# dependencies and extras [dev,cluster,clip], recursively. Regenerate: make lock\n")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(project: str = "captioning", extras: tuple[str, ...] = EXTRAS) -> dict[str, str]:
    """{distribution name: installed version} of everything `project[extras]` requires."""
    env = default_environment()
    seen: dict[str, str] = {}
    # The extras each package was asked with, all requirers together: a package met first
    # without an extra (fsspec) and later with one (fsspec[http]) is read again for the new one.
    asked: dict[str, set[str]] = {}
    todo = [(project, set(extras))]
    while todo:
        name, wanted = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise UserError(f"{name} is required but not installed here; run `make install` first") from None
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in wanted | {""}):
                continue
            key = _canonical(req.name)
            if key not in seen:
                if not _installed(req.name):  # an optional dependency not installed: not needed here
                    continue
                seen[key] = metadata.distribution(req.name).metadata["Name"]
            elif set(req.extras) <= asked[key]:
                continue
            asked[key] = asked.get(key, set()) | set(req.extras)
            todo.append((req.name, asked[key]))
    return {seen[k]: metadata.version(seen[k]) for k in seen if k != _canonical(project)}


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def render(pins: dict[str, str]) -> str:
    return HEADER + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items(), key=lambda p: p[0].lower()))


@report_user_errors  # a missing package: one line on stderr, exit status 2
def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only say whether the file is up to date")
    p.add_argument("--out", default=str(ROOT / "requirements.lock"))
    args = p.parse_args(argv)
    text, out = render(closure()), Path(args.out)
    if args.check:
        if out.read_text() != text:
            raise UserError(f"{out} is not the closure of the installed dependencies; run "
                            "maint/lock_requirements.py")
        print(f"{out}: up to date")
        return
    out.write_text(text)
    print(f"{out}: {len(text.splitlines()) - 2} pins")


if __name__ == "__main__":
    main()
