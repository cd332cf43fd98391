"""Every link in README.md, data/README.md and docs/ resolves: the file exists (relative to the
page, as GitHub reads it) and an #anchor names a heading of the page it points into. The
README stays a ten-minute read (at most 80 lines): everything else has its page in docs/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "data" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation other than - and _ dropped, spaces -> -."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"(?m)^#{1,6} (.+)$", text)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
    return [a or b for a, b in LINK.findall(text)]


def broken(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_resolves(page):
    assert broken(page) == []


def test_a_broken_link_is_caught(tmp_path):
    """Negative control: a missing file and a missing heading are both reported."""
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Title\n## A section\n")
    page.write_text("[a](other.md#a-section) [b](missing.md) [c](other.md#nope) [d](#here)\n## Here\n")
    assert [b.split(":")[0] for b in broken(page)] == ["missing.md", "other.md#nope"]


def test_the_readme_is_a_ten_minute_read():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 80


@pytest.mark.parametrize("page", PAGES[1:], ids=[str(p.relative_to(ROOT)) for p in PAGES[1:]])
def test_each_doc_reads_at_a_sitting(page):
    assert len(page.read_text().splitlines()) <= 300


def test_the_product_speaks_of_itself():
    """The product's files say what it does and how to run it: none of the words
    maint/work_words.txt lists (about how it was made, or paths outside the repository);
    pytest's own scope="session" is fine."""
    import subprocess

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = ROOT / "maint" / "work_words.txt"
    words = "|".join(w for w in listed.read_text().splitlines() if w and not w.startswith("#"))
    paths = ["README.md", "docs", "captioning", "conf", "scripts", "tests", "data/README.md", "maint",
             f":!{listed.relative_to(ROOT)}"]
    found = subprocess.run(["git", "grep", "-n", "-i", "-E", words, "--", *paths],
                           cwd=ROOT, capture_output=True, text=True).stdout.splitlines()
    assert [f for f in found if 'scope="session"' not in f] == []
