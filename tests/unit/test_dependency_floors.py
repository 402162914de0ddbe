"""The web extra's floors exclude the versions with known pre-login DoS advisories.

The dashboard serves ``/static`` and parses the login form before anyone
has logged in, so a floor that admits a vulnerable Starlette or
python-multipart lets any client that reaches the port stall it. Each
floor below names the advisories it keeps out; raise it when a new one is
published.
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # as jobmaster.config reads TOML there
    import tomli as tomllib

pytestmark = pytest.mark.timeout(30)

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
FIXED = {
    # CVE-2025-62727 (GHSA-7f5h-v6xp-fcq8): O(n^2) Range header on FileResponse
    # and StaticFiles, fixed in 0.49.1; CVE-2026-48710 (GHSA-86qp-5c8j-p5mr):
    # an unchecked Host header rebuilds request.url with another path, fixed in 1.0.1.
    "starlette": Version("1.0.1"),
    # CVE-2024-53981 (GHSA-59g5-xgcq-4qw3, fixed 0.0.18), CVE-2026-40347
    # (GHSA-mj87-hwqh-73pj, fixed 0.0.26), CVE-2026-42561 (GHSA-pp6c-gr5w-3c5g,
    # fixed 0.0.27): CPU exhaustion while parsing a multipart form.
    "python-multipart": Version("0.0.27"),
}


def floors() -> dict[str, Version]:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    found = {}
    for line in extras["web"]:
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                found[requirement.name] = Version(spec.version)
    return found


@pytest.mark.parametrize("name", sorted(FIXED))
def test_the_floor_excludes_the_vulnerable_versions(name: str) -> None:
    assert floors().get(name, Version("0")) >= FIXED[name], name


@pytest.mark.parametrize("name", sorted(FIXED))
def test_the_installed_version_is_a_fixed_one(name: str) -> None:
    assert Version(version(name)) >= FIXED[name], name
