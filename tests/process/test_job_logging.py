"""Per-job JSON lines from a real master's children, with ``[log_levels]`` from the file.

What only a real run shows: the children inherit the master's logging (the
per-logger levels included) through fork, and their lines carry ``child``.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from jobmaster.client import Client
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess, wait_for_worker

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


def entries(master: JobmasterProcess) -> list[dict[str, Any]]:
    # Every line is one JSON object; a partial last line is still being written.
    lines = master.log().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def test_children_log_job_lines_as_json_with_levels_from_the_file(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    # write_config spells the table's keys unquoted: TOML nests them, and
    # log_levels must read them back as the logger's dotted name.
    config = write_config(
        processes=1, log_format="json", log_levels={"jobmaster.worker.executor": "warning"}
    )
    master = run_jobmaster("-c", str(config))
    wait_for_worker(store, master)
    client = Client(redis_url)
    quiet = client.push({"job": "tests.record", "args": ["quiet"]})
    failing = client.push({"job": "tests.dropped", "args": ["loud"]})

    def failure_line() -> list[dict[str, Any]]:
        return [e for e in entries(master) if e.get("jid") == failing]

    wait_until(failure_line, timeout=20, message="the failure is logged")
    wait_until(lambda: store.sismember("test:done", "quiet"), timeout=20)
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0, master.log()

    [line] = failure_line()  # its job.start is INFO, below the logger's level
    assert line["event"] == "job.failed"
    assert line["child"] == 1
    assert line["pid"] != master.pid
    assert line["error"] == "ValueError: dropped on failure"
    assert not [e for e in entries(master) if e.get("jid") == quiet]
    assert any(e["level"] == "info" and e.get("pid") == master.pid for e in entries(master))
