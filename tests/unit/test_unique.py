"""Unique jobs' digest and options, without Redis."""

from __future__ import annotations

import pytest

import jobmaster
from jobmaster.unique import LOCK_TTL, check_mode, digest, lock_ttl


def test_the_digest_depends_on_the_job_and_its_arguments_only() -> None:
    assert digest("a.job", [1, "x"], {"k": 1}, None) == digest("a.job", (1, "x"), {"k": 1}, None)
    assert digest("a.job", [1], {}, None) != digest("a.job", [2], {}, None)
    assert digest("a.job", [1], {}, None) != digest("b.job", [1], {}, None)
    assert digest("a.job", [], {"a": 1, "b": 2}, None) == digest(
        "a.job", [], {"b": 2, "a": 1}, None
    )


def test_unique_args_choose_what_counts() -> None:
    first = digest("a.job", [42, "hello"], {}, lambda args, kwargs: [args[0]])
    assert first == digest("a.job", [42, "other"], {}, lambda args, kwargs: [args[0]])


@pytest.mark.parametrize("mode", ["until_executed", "until_started", 30, 0.5, None])
def test_valid_modes(mode: object) -> None:
    check_mode(mode)


@pytest.mark.parametrize("mode", ["forever", 0, -5, True, [1]])
def test_invalid_modes_are_refused_at_decoration(mode: object) -> None:
    with pytest.raises(ValueError, match="unique must be"):
        jobmaster.job(name="tests.unit.bad_unique", unique=mode)(lambda: None)


def test_lock_ttl() -> None:
    assert lock_ttl(30) == 30 and lock_ttl(0.2) == 1
    assert lock_ttl("until_executed") == LOCK_TTL
