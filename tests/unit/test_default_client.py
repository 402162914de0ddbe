"""A producer without ``configure(...)`` says once where it connects.

It talked to the built-in default address without a word while its workers
used the embedded Redis: jobs pushed to someone else's server, or nowhere.
"""

from __future__ import annotations

import logging

import pytest

from jobmaster import client as producer
from tests.helpers import FORBIDDEN_PORT

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def unconfigured(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(producer, "_default", None)
    monkeypatch.delenv("JOBMASTER_REDIS_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    return monkeypatch


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "jobmaster.client"]


def test_the_built_in_default_is_a_warning_once(
    unconfigured: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobmaster")
    first = producer.default_client()
    assert producer.default_client() is first  # lazy: nothing was sent to Redis
    (record,) = lines(caplog)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    # Named, never connected to: the client is lazy (the shared Redis is off limits).
    built_in = f"redis://127.0.0.1:{FORBIDDEN_PORT}/0"
    assert f"no jobmaster.configure(...) call: producing to Redis at {built_in}" in message
    assert "JOBMASTER_REDIS_URL is not set" in message and "embedded" in message


def test_a_url_from_the_environment_is_named_with_its_variable_masked(
    unconfigured: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobmaster")
    unconfigured.setenv("REDIS_URL", "redis://:hunter2@10.0.0.5:6380/2")
    producer.default_client()
    (record,) = lines(caplog)
    assert record.levelno == logging.INFO
    assert "redis://:***@10.0.0.5:6380/2 (from REDIS_URL)" in record.getMessage()
    assert "hunter2" not in record.getMessage()


def test_a_configured_producer_says_nothing(
    unconfigured: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobmaster")
    configured = producer.configure("redis://127.0.0.1:1/0")
    assert producer.default_client() is configured
    assert not lines(caplog)
