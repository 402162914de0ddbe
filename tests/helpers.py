"""Helpers shared by every test layer (also exposed as fixtures in conftest)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

# The shared Redis of this machine: tests must never talk to it.
FORBIDDEN_PORT = 6379


def free_port() -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    assert port != FORBIDDEN_PORT
    return port


def wait_until(
    predicate: Callable[[], object],
    timeout: float,
    interval: float = 0.01,
    message: str = "",
) -> None:
    """Poll ``predicate`` until truthy; AssertionError after ``timeout`` seconds.

    Tests wait for a condition instead of sleeping and hoping it happened.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(message or f"condition not met within {timeout}s: {predicate!r}")
        time.sleep(interval)


def holds_for(seconds: float, predicate: Callable[[], object], message: str = "") -> None:
    """Assert ``predicate`` stays truthy for ``seconds``: a negative ("nothing ran
    twice", "no job was fetched") needs a duration to mean anything."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message or f"stopped holding within {seconds}s: {predicate!r}"
        time.sleep(0.02)
