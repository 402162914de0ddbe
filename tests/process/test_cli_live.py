"""The operator's commands as an operator runs them: separate ``jobmaster``
processes, ``-c FILE``, against a running master, checked by output and exit code.

tests/integration/test_cli_ops.py covers each command's options in process;
this proves the same commands work end to end beside a live master, whose
children really run what ``retry`` and ``queue resume`` release.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from jobmaster import exitcodes
from jobmaster.client import Client
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command, wait_for_worker

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]
HOUR = 3600


def jm(config: Path, url: str, *args: str, code: int = 0) -> str:
    """``jobmaster ARGS -c FILE``; asserts its exit code, returns its output."""
    done = subprocess.run(
        [jobmaster_command(), *args, "-c", str(config)],
        cwd=ROOT,
        env={**os.environ, "JOBMASTER_REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == code, f"jobmaster {' '.join(args)}: exit {done.returncode}\n{output}"
    assert "Traceback" not in done.stderr, output  # errors are one line (the data may hold one)
    return done.stdout


def listed(config: Path, url: str, kind: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(jm(config, url, kind, "list", "--json"))
    return entries


def test_the_operators_commands_against_a_running_master(
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
    store: redis.Redis,
    redis_url: str,
) -> None:
    config = write_config(processes=1, concurrency=2)
    master = run_jobmaster("-c", str(config))
    wait_for_worker(store, master)
    client = Client(redis_url)

    dead_jid = client.push({"job": "tests.permanent", "args": ["p1"]})
    retry_jid = client.push({"job": "tests.fails", "args": ["r1"], "retry": 5, "backoff": HOUR})
    later_jid = client.push({"job": "tests.record", "args": ["s1"], "at": time.time() + HOUR})
    wait_until(lambda: store.hget("test:attempts", "r1") is not None, 10, message="r1 to fail")
    wait_until(lambda: len(listed(config, redis_url, "dead")) == 1, 10, message="p1 dead")

    stats = json.loads(jm(config, redis_url, "stats", "--json"))
    assert (stats["dead_size"], stats["retry_size"], stats["scheduled_size"]) == (1, 1, 1)
    assert stats["failed"] >= 2
    assert "default" in jm(config, redis_url, "stats")

    [dead] = listed(config, redis_url, "dead")
    assert (dead["jid"], dead["job"]) == (dead_jid, "tests.permanent")
    assert dead_jid in jm(config, redis_url, "dead", "show", str(dead_jid))
    jm(config, redis_url, "dead", "show", "0" * 24, code=exitcodes.NOT_FOUND)
    jm(config, redis_url, "dead", "retry", code=2)  # no selector: bad usage
    assert [e["jid"] for e in listed(config, redis_url, "retries")] == [retry_jid]

    # Retried, the dead job runs again in the live child (and fails again).
    jm(config, redis_url, "dead", "retry", str(dead_jid))
    wait_until(lambda: store.hget("test:attempts", "p1") == b"2", 10, message="p1 rerun")
    wait_until(lambda: len(listed(config, redis_url, "dead")) == 1, 10, message="p1 dead again")
    jm(config, redis_url, "dead", "clear", "--yes")
    assert listed(config, redis_url, "dead") == []

    assert [e["jid"] for e in listed(config, redis_url, "scheduled")] == [later_jid]
    jm(config, redis_url, "scheduled", "delete", str(later_jid))
    assert listed(config, redis_url, "scheduled") == []

    # A paused queue holds a new job while the master runs; resumed, it runs.
    jm(config, redis_url, "queue", "pause", "default")
    jm(config, redis_url, "enqueue", "tests.record", '"q1"')
    queues = {q["name"]: q for q in json.loads(jm(config, redis_url, "queue", "list", "--json"))}
    assert queues["default"]["paused"] and queues["default"]["size"] == 1
    held_until = time.monotonic() + 1.0
    while time.monotonic() < held_until:  # a second in which a live child could fetch it
        assert not store.sismember("test:done", "q1")
        time.sleep(0.05)
    jm(config, redis_url, "queue", "resume", "default")
    wait_until(lambda: store.sismember("test:done", "q1"), 10, message="q1 to run after resume")

    assert "tests.record" in jm(config, redis_url, "check")  # it lists the jobs it would run
    assert master.popen.poll() is None
