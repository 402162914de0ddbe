"""Expiry (jobmaster/expiry.py): the option, the payload field, the decision."""

from __future__ import annotations

from typing import Any

import pytest

import jobmaster
from jobmaster import expiry
from jobmaster.job import JobOptions


@pytest.mark.parametrize("bad", [0, -1, "60", True, float("inf"), float("nan")])
def test_expires_in_must_be_seconds_above_zero(bad: object) -> None:
    with pytest.raises(ValueError, match="expires_in must be seconds > 0"):
        JobOptions(expires_in=bad)  # type: ignore[arg-type]


@jobmaster.job(name="tests.unit.expiring", expires_in=300)
def expiring() -> None: ...


def test_the_option_travels_in_the_payload_and_options_override_it() -> None:
    assert JobOptions(expires_in=300).payload_fields() == {"expires_in": 300}
    assert JobOptions().payload_fields() == {}
    assert expiring.job_options.expires_in == 300
    assert expiring.options(expires_in=5).job_options.expires_in == 5
    assert expiring.s().options["expires_in"] == 300  # chain steps and callbacks too
    with pytest.raises(ValueError):
        expiring.options(expires_in=0)


def payload(**fields: Any) -> dict[str, Any]:
    return {"jid": "a" * 24, "job": "x", "args": [], "queue": "default", **fields}


def test_a_job_expires_expires_in_seconds_after_its_creation() -> None:
    job = payload(created_at=1000.0, expires_in=60)
    assert expiry.expires_at(job) == 1060.0
    assert not expiry.expired(job, 1059.9)
    assert not expiry.expired(job, 1060.0)
    assert expiry.expired(job, 1060.1)


@pytest.mark.parametrize(
    "fields",
    [
        {"created_at": 1000.0},  # no expiry asked
        {"expires_in": 60},  # nothing to count from: a producer that sets no created_at
        {"created_at": 1000.0, "expires_in": "60"},
        {"created_at": 1000.0, "expires_in": -5},
        {"created_at": 1000.0, "expires_in": True},
        {"created_at": "then", "expires_in": 60},
        {"created_at": 1000.0, "expires_in": None},
    ],
)
def test_a_missing_or_forged_field_means_no_expiry(fields: dict[str, Any]) -> None:
    """Anything may be in Redis: a job whose expiry cannot be read runs."""
    assert expiry.expires_at(payload(**fields)) is None
    assert not expiry.expired(payload(**fields), 10**10)
