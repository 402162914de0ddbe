"""The settings reference (docs/configuration.md) is generated from SETTINGS and must not drift.

Regenerate it with ``python -m jobmaster.settings`` and paste the output
between the marker lines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobmaster.settings import reference_markdown

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
START, END = "<!-- settings:start -->", "<!-- settings:end -->"


@pytest.mark.skipif(not REFERENCE.exists(), reason="docs/configuration.md is not written yet")
def test_docs_embed_the_settings_reference() -> None:
    lines = REFERENCE.read_text().splitlines()
    assert lines.count(START) == 1, f"docs/configuration.md needs exactly one line {START}"
    assert lines.count(END) == 1, f"docs/configuration.md needs exactly one line {END}"
    # Blank lines around the table are the page's own layout, not drift.
    between = "\n".join(lines[lines.index(START) + 1 : lines.index(END)]).strip("\n")
    expected = reference_markdown().strip("\n")
    assert between == expected, "docs/configuration.md is stale: run python -m jobmaster.settings"
