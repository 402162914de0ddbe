"""What a stop says, in each process: a child's line names the master's stop
it comes from.

On Ctrl-C the master logged "SIGINT: graceful stop" and each child
"SIGTERM: graceful stop", as if something else had TERMed them.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.process.conftest import JobmasterProcess, wait_for_worker
from tests.process.test_master import working_children

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]
Run = Callable[..., JobmasterProcess]


def test_a_child_says_its_term_is_the_masters_stop_forwarded(
    run_jobmaster: Run, write_config: Callable[..., Path], store: redis.Redis
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2)))
    working_children(store, master, 2)
    master.signal(signal.SIGINT)
    assert master.wait(timeout=30) == 0, master.log()
    log = master.log()
    assert "SIGINT: graceful stop" in log
    forwarded = [
        line
        for line in log.splitlines()
        if "the master's stop (SIGINT), forwarded as SIGTERM: graceful stop" in line
    ]
    assert len(forwarded) == 2, log
    assert "child=" in forwarded[0] or "child " in forwarded[0], forwarded


def test_a_term_from_elsewhere_is_still_named_as_such(
    run_jobmaster: Run, write_config: Callable[..., Path], store: redis.Redis
) -> None:
    """A lone worker has no master: its TERM is the platform's."""
    worker = run_jobmaster("worker", "-c", str(write_config()))
    wait_for_worker(store, worker)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.log()
    assert "SIGTERM: graceful stop" in worker.log()
    assert "forwarded" not in worker.log()
