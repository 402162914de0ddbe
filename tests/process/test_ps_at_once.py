"""What ``jobmaster ps`` shows is true at once, not a heartbeat later.

For a few seconds after a start ``ps`` showed the master as ``0/0`` and its
children as "(no master)", and its QUIET column lagged a ``ctl quiet`` or
``resume`` by up to a beat (5 s): the master wrote its state only on its
heartbeat. It now writes it (on its Redis thread) as soon as it changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobmaster.api import Process, ProcessSet
from jobmaster.client import Client
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]
Run = Callable[..., JobmasterProcess]
AT_ONCE = 1.5  # seconds: a loaded machine's loop pass, a control read, a write


def snapshot(processes: ProcessSet) -> tuple[Process | None, list[Process]]:
    found = processes.list()
    masters = [p for p in found if p.role == "master"]
    return (masters[0] if masters else None), [p for p in found if p.role == "child"]


def test_a_new_master_lists_its_children_as_soon_as_they_are_up(
    run_jobmaster: Run, write_config: Callable[..., Path], redis_url: str
) -> None:
    processes = ProcessSet(Client(redis_url))
    master = run_jobmaster("-c", str(write_config(processes=2)))
    seen: dict[str, float] = {}

    def true_at_once() -> bool:
        assert master.popen.poll() is None, master.log()
        head, children = snapshot(processes)
        now = time.monotonic()
        if len(children) == 2:
            seen.setdefault("children", now)
        orphans = [c for c in children if c.master is None]
        if head is not None and len(head.children) == 2 and len(children) == 2 and not orphans:
            seen.setdefault("true", now)
            return True
        return False

    wait_until(true_at_once, timeout=30, interval=0.02, message="ps: the master and 2 children")
    assert seen["true"] - seen["children"] < AT_ONCE, seen


@pytest.mark.parametrize("command", ["quiet", "resume"])
def test_quiet_and_resume_show_at_once(
    run_jobmaster: Run, write_config: Callable[..., Path], redis_url: str, command: str
) -> None:
    processes = ProcessSet(Client(redis_url))
    master = run_jobmaster("-c", str(write_config(processes=1)))
    wait_until(
        lambda: (s := snapshot(processes))[0] is not None and len(s[0].children) == 1,
        timeout=30,
        message="the master up",
    )
    head, _ = snapshot(processes)
    assert head is not None
    if command == "resume":
        processes.send(head.identity, "quiet")
        wait_until(lambda: snapshot(processes)[0].quiet, timeout=10, message="quiet")  # type: ignore[union-attr]
    sent = time.monotonic()
    assert processes.send(head.identity, command)
    wanted = command == "quiet"
    wait_until(
        lambda: (s := snapshot(processes)[0]) is not None and s.quiet == wanted,
        timeout=10,
        interval=0.02,
        message=f"ps shows {command}",
    )
    assert time.monotonic() - sent < AT_ONCE
    assert master.popen.poll() is None
