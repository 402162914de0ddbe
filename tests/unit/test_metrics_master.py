"""The master's own metrics events, against the fake OS seam of test_master_loop.

Why each child went (the ``reason`` of jobmaster_child_restarts_total), the
jobs requeued from dead children, and what a forked child must not inherit.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator

import pytest

from jobmaster.supervisor.children import STARTING, STOPPING
from tests.unit.test_master_loop import Harness, exited_with, killed_by

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch, free_port: int) -> Iterator[Harness]:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    built = Harness(monkeypatch, processes=2, metrics_port=free_port)
    master = built.master
    assert master.metrics is not None
    master.metrics.start()
    try:
        yield built
    finally:
        master.metrics.close()
        built.close()


def restarts(harness: Harness) -> dict[str, int]:
    assert harness.master.metrics is not None
    return {k: v for k, v in harness.master.metrics.counters.restarts.items() if v}


def test_a_crash_is_a_restart_and_its_jobs_count_as_requeued(harness: Harness) -> None:
    first, second = harness.start_all()
    harness.die(first, killed_by(signal.SIGKILL))
    harness.die(second, exited_with(0))  # left by itself, not asked: replaced too
    assert restarts(harness) == {"crash": 1, "exit": 1}
    assert harness.master.metrics is not None
    assert harness.master.metrics.counters.requeued == 2  # FakeRecovery: one jid each


def test_recycles_and_rolling_restarts_are_restarts_by_their_reason(harness: Harness) -> None:
    first, second = harness.start_all()
    os.write(harness.write_ends[first.pid], b"M")
    harness.master.read_ready(first)
    os.write(harness.write_ends[second.pid], b"T")
    harness.master.read_ready(second)
    harness.die(first, exited_with(0))
    harness.die(second, exited_with(0))
    assert restarts(harness) == {"max_jobs": 1, "timeout": 1}

    harness.master.spawn_missing()
    for child in harness.children():
        harness.ready(child)
    bloated, other = harness.children()
    harness.master.memory.recycle(bloated, "uses 200 MB", "over max_child_mb 150 (uss)")
    harness.die(bloated, killed_by(signal.SIGKILL))  # killed after its grace
    harness.master.handle_sighup()  # ``other`` retires once its replacement is ready
    harness.master.spawn_missing()
    for child in harness.children():
        if child.state == STARTING:
            harness.ready(child)
    assert other.state == STOPPING
    harness.die(other, exited_with(0))
    assert restarts(harness) == {"max_jobs": 1, "timeout": 1, "memory": 1, "hup": 1}


def test_a_stop_is_no_restart(harness: Harness) -> None:
    first, second = harness.start_all()
    harness.master.handle_sigterm()
    harness.die(first, exited_with(0))
    harness.die(second, killed_by(signal.SIGKILL))  # outlived its deadline
    assert restarts(harness) == {}


def test_a_child_inherits_the_report_socket_but_not_the_master_s_own(harness: Harness) -> None:
    hub = harness.master.metrics
    assert hub is not None and hub.server.listener is not None
    harness.master.spawn_missing()
    for _, closed in harness.forks:
        assert hub.receiver.fileno() in closed
        assert hub.server.listener.fileno() in closed
        assert hub.sender.fileno() not in closed


def test_wait_accepts_a_scraper_in_the_loop_s_own_select(harness: Harness) -> None:
    hub = harness.master.metrics
    assert hub is not None
    harness.start_all()
    with socket.create_connection(hub.server.address, timeout=5):
        for _ in range(20):  # each pass returns as soon as a socket is readable
            harness.master.wait()
            if hub.server.connections:
                break
        assert len(hub.server.connections) == 1
