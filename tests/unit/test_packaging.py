"""pyproject's license is the SPDX string (PEP 639), with a setuptools that reads it.

The table form (``license = { text = "MIT" }``) makes every ``pip install``
warn that it is deprecated, and setuptools refuses it from 2027-02-18; the
string form needs setuptools >= 77 in the build environment, so the floor in
build-system.requires must say so or an older setuptools fails the build.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # as jobmaster.config reads TOML there
    import tomli as tomllib

pytestmark = pytest.mark.timeout(30)

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def test_the_license_is_an_spdx_string() -> None:
    assert PYPROJECT["project"]["license"] == "MIT"


def test_the_build_requires_a_setuptools_that_reads_it() -> None:
    (setuptools,) = [
        Requirement(text)
        for text in PYPROJECT["build-system"]["requires"]
        if Requirement(text).name == "setuptools"
    ]
    assert not setuptools.specifier.contains(Version("76.9")), setuptools
    assert setuptools.specifier.contains(Version("77.0"))
