"""Every relative link in README.md and docs/*.md reaches a file, and its anchor a heading.

The README is the short guide and docs/ holds the reference behind it: a page
renamed or a heading reworded would otherwise leave the guide pointing at
nothing, and nobody notices until a user clicks.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
EXTERNAL = ("http://", "https://", "mailto:")


def without_code(text: str) -> list[str]:
    """The page's lines outside fenced code blocks (a ``# comment`` there is no heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in without_code(page.read_text()):
        heading = re.match(r"^#{1,6} (.+)$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_the_slug_is_githubs() -> None:
    assert slug("Redis ACL: a user limited to jobmaster's keys") == (
        "redis-acl-a-user-limited-to-jobmasters-keys"
    )
    assert slug("Metrics (Prometheus)") == "metrics-prometheus"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for line in without_code(page.read_text()):
        for target in LINK.findall(line):
            if target.startswith(EXTERNAL):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{target}: no file {os.path.relpath(dest, ROOT)}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{target}: no heading #{anchor} in {os.path.relpath(dest, ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
