"""A child's main thread: every signal, command and master request is acted on."""

from __future__ import annotations

import os
import queue
import signal
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from jobmaster.config import Config
from jobmaster.pipes import RECYCLE, send_request
from jobmaster.signals import CHILD_SIGNALS, MASTER_ONLY
from jobmaster.worker import child as child_module
from jobmaster.worker.child import Steering


class FakeManager:
    def __init__(self) -> None:
        self.quiet_now = False
        self.busy = 1
        self.completed = 0
        self.max_jobs = 0
        self.calls: list[str] = []

    def quiet(self) -> None:
        self.quiet_now = True
        self.calls.append("quiet")

    def resume(self) -> None:
        self.quiet_now = False
        self.calls.append("resume")

    def leave(self) -> None:
        self.quiet_now = True
        self.calls.append("leave")


@pytest.fixture
def steering(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(child_module, "set_title", lambda title: None)
    dumps: list[int] = []
    monkeypatch.setattr(child_module, "dump_threads", lambda: dumps.append(1))
    worker = SimpleNamespace(
        ctx=SimpleNamespace(identity=SimpleNamespace(index=1)),
        manager=FakeManager(),
        commands=queue.SimpleQueue(),
        stuck=queue.SimpleQueue(),
    )
    read_end, write_end = os.pipe()
    steer = Steering(worker, Config(), None, None, read_end)  # type: ignore[arg-type]
    steer.dumps = dumps  # type: ignore[attr-defined]
    steer.requests_w = write_end  # type: ignore[attr-defined]
    try:
        yield steer
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("signum", [signal.SIGTSTP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP])
def test_a_remote_stop_that_arrives_with_a_signal_is_not_dropped(
    steering: Any, signum: int
) -> None:
    steering.worker.commands.put("stop")
    assert steering.step(signum) == "remote stop"


def test_a_remote_quiet_that_arrives_with_a_signal_is_acted_on_too(steering: Any) -> None:
    steering.worker.commands.put("quiet")
    assert steering.step(signal.SIGUSR1) is None
    assert steering.worker.manager.calls == ["quiet"]
    assert steering.dumps == [1]


@pytest.mark.parametrize("signum", sorted(MASTER_ONLY))
def test_signals_meant_for_the_master_do_nothing_in_a_child(steering: Any, signum: int) -> None:
    assert signum in CHILD_SIGNALS  # caught: not HUP's default (die) nor TTIN's (stop)
    assert steering.step(signum) is None
    assert steering.worker.manager.calls == []
    assert steering.recycle_deadline is None  # USR2 is no recycle: only a request is


def test_a_usr1_forwarded_by_the_master_and_received_directly_dumps_once(steering: Any) -> None:
    assert steering.step(signal.SIGUSR1) is None
    assert steering.step(signal.SIGUSR1) is None
    assert steering.dumps == [1]


def test_a_recycle_request_says_which_limit_and_blames_with_it(steering: Any) -> None:
    assert send_request(steering.requests_w, RECYCLE, "container memory guard (600 MB)")
    assert steering.step(None) is None
    assert steering.worker.manager.calls == ["leave"]  # quiet for good
    assert steering.memory_cause == "container memory guard (600 MB)"
    assert steering.recycle_reason == "recycled by the master: container memory guard (600 MB)"
    steering.worker.manager.busy = 0  # its jobs are done: it stops for that reason
    assert steering.step(None) == steering.recycle_reason


def test_a_term_during_a_recycle_gets_the_lesser_of_its_time_left_and_shutdown_timeout(
    steering: Any,
) -> None:
    """Hole 1, the child's side: a TERM 1.5 s into a 30 s recycle leaves the
    jobs shutdown_timeout, not 28.5 s; a recycle about to end keeps its end
    (and its blame, over memory)."""
    steering.config.shutdown_timeout, steering.config.memory_grace = 3.0, 30.0
    assert steering.stop_timeout("SIGTERM") == (3.0, False)  # not recycling
    assert send_request(steering.requests_w, RECYCLE, "over max_child_mb 200 (uss)")
    assert steering.step(None) is None
    timeout, blamed = steering.stop_timeout("SIGTERM")
    assert (timeout, blamed) == (3.0, False)  # cut short by the TERM: no blame
    steering.recycle_deadline -= 28.5  # 1.5 s of its grace left
    timeout, blamed = steering.stop_timeout("SIGTERM")
    assert 1.0 < timeout <= 1.5 and blamed
    assert steering.stop_timeout(steering.recycle_reason) == (3.0, True)
    assert steering.stop_timeout("SIGQUIT") == (0.0, False)
