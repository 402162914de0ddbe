"""Jobs that return things, for the result tests (tests/process/test_results.py)."""

from __future__ import annotations

import datetime
import time

import jobmaster


@jobmaster.job(name="tests.results.add")
def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


@jobmaster.job(name="tests.results.nothing")
def nothing() -> None:
    return None


@jobmaster.job(name="tests.results.fails", retry=0)
def fails(message: str) -> None:
    raise ValueError(message)


@jobmaster.job(name="tests.results.slow")
def slow(seconds: float) -> str:
    # Short sleeps: a cancel (like a timeout) is raised when the thread is back in Python.
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return f"slept {seconds:g}"


@jobmaster.job(name="tests.results.not_json")
def not_json() -> object:
    return {"when": datetime.date(2026, 12, 1)}


@jobmaster.job(name="tests.results.brief", result_ttl=2)
def brief() -> str:
    return "soon gone"
