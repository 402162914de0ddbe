"""Whether the end-to-end browser tests can run: Debian's chromium and Playwright.

CI installs both (.ci/run); elsewhere the tests skip and say what is missing.
Playwright's own browser download is never used (it cannot reach the
network here): Playwright drives the system's chromium by path.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def missing() -> str:
    """Why the browser tests cannot run ('' if they can)."""
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[test,web]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no {CHROMIUM} (apt-get install chromium)"
    return ""


requires_browser = pytest.mark.skipif(bool(missing()), reason=missing() or "browser available")
