"""What the master does to its own state before it forks a child."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import pytest

from jobmaster.config import Config
from jobmaster.supervisor import spawn


def test_the_garbage_of_the_moment_is_collected_before_the_heap_is_frozen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Frozen garbage is kept in every child for good: collect first."""
    calls: list[str] = []
    fake_gc = SimpleNamespace(
        collect=lambda: calls.append("collect"), freeze=lambda: calls.append("freeze")
    )
    monkeypatch.setattr(spawn, "gc", fake_gc)

    def no_fork() -> int:
        calls.append("fork")
        raise OSError("no fork in a unit test")

    monkeypatch.setattr(spawn.os, "fork", no_fork)
    with pytest.raises(OSError, match="no fork"):
        spawn.fork_child(Config(), 1)
    assert calls == ["collect", "freeze", "fork"]


def test_threads_the_preloaded_app_started_are_named_in_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done = threading.Event()
    thread = threading.Thread(target=done.wait, name="app-metrics-exporter", daemon=True)
    thread.start()
    try:
        with caplog.at_level(logging.WARNING, logger="jobmaster.supervisor.spawn"):
            spawn.warn_about_threads()
    finally:
        done.set()
        thread.join()
    [record] = caplog.records
    assert "app-metrics-exporter" in record.getMessage()
    assert "children do not have them" in record.getMessage()


def test_no_warning_when_only_the_main_thread_runs(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever else this test process runs: it was skipped in every full run,
    where earlier tests had left threads behind (a leak of ours now fails the
    test that leaked it: tests/conftest.py)."""
    monkeypatch.setattr(spawn.threading, "enumerate", lambda: [threading.main_thread()])
    with caplog.at_level(logging.WARNING, logger="jobmaster.supervisor.spawn"):
        spawn.warn_about_threads()
    assert caplog.records == []
