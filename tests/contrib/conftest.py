"""Fixtures for the integrations' tests: the real ``jobmaster`` command as a
subprocess (tests/process/conftest.py), and a skip when the integration's
library is not installed (``pip install -e '.[integrations-test]'``)."""

from __future__ import annotations

from tests.process.conftest import run_jobmaster, store, write_config

__all__ = ["run_jobmaster", "store", "write_config"]
