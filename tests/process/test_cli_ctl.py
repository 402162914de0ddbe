"""``jobmaster ps`` and ``jobmaster ctl`` against a real master.

``ps`` runs in process (CliRunner); ``ctl`` runs as its own ``jobmaster``
process, as an operator on another host would run it. Both read the config
file: it names a namespace of its own, so a command that ignored ``-c FILE``
would look in the default one and find nobody. The Redis URL comes from the
environment (which outranks the file), as the master's does: a command that
ignored the file must not fall back to the default, shared Redis.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from click.testing import CliRunner

from jobmaster import exitcodes
from jobmaster.api import Queue
from jobmaster.cli import main
from jobmaster.client import Client
from tests.helpers import holds_for, wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command

pytestmark = pytest.mark.process
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]
NAMESPACE = "ctltest"


def title(pid: int) -> str:
    """The process title (setproctitle pads the command line with empty strings)."""
    return " ".join(part for part in psutil.Process(pid).cmdline() if part)


@dataclass
class Operator:
    """Runs the operator's commands with ``-c FILE`` on the test's Redis."""

    config: Path
    redis_url: str

    def ps(self, *args: str) -> str:
        """``jobmaster ps ARGS -c FILE`` in process."""
        env = {"JOBMASTER_REDIS_URL": self.redis_url}
        result = CliRunner(env=env).invoke(main, ["ps", *args, "-c", str(self.config)])
        assert result.exit_code == 0, result.output
        return result.output

    def processes(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = json.loads(self.ps("--json"))
        return listed

    def ctl(self, *args: str) -> str:
        """``jobmaster ctl ARGS -c FILE`` as a separate process; returns its output."""
        done = subprocess.run(
            [jobmaster_command(), "ctl", *args, "-c", str(self.config)],
            cwd=ROOT,
            env={**os.environ, "JOBMASTER_REDIS_URL": self.redis_url},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def wait_for(self, master: JobmasterProcess, children: int) -> list[dict[str, Any]]:
        """The master and its children, once ``ps`` lists them all."""
        found: list[dict[str, Any]] = []

        def listed() -> bool:
            assert master.popen.poll() is None, master.log()
            found[:] = self.processes()
            kids = [p for p in found if p["role"] == "child" and p["master"]]
            return len(found) == children + 1 and len(kids) == children

        wait_until(listed, timeout=20, message=f"the master and {children} children listed")
        return found


def stopping_or_gone(master: JobmasterProcess) -> bool:
    if master.popen.poll() is not None:
        return True
    with contextlib.suppress(psutil.Error):  # it may exit between the two checks
        return title(master.pid).endswith("stopping")
    return False


def test_ps_lists_a_master_and_ctl_quiets_resumes_and_stops_it(
    run_jobmaster: Run, write_config: Write, redis_url: str, store: redis.Redis
) -> None:
    # heartbeat_ttl 9: children beat every 3 s, and it outlasts the master's 5 s
    # between beats (a shorter one lets the master's heartbeat lapse: not listed).
    config = write_config(processes=2, heartbeat_ttl=9, namespace=NAMESPACE)
    operator = Operator(config, redis_url)
    master = run_jobmaster("-c", str(operator.config))
    boss, *children = operator.wait_for(master, 2)

    assert (boss["role"], boss["pid"], boss["capacity"]) == ("master", master.pid, 6)
    real = {p.pid for p in psutil.Process(master.pid).children()}
    assert {c["pid"] for c in children} == real
    assert [(c["role"], c["index"]) for c in children] == [("child", 1), ("child", 2)]
    rows = operator.ps().splitlines()[1:]
    assert rows[0].split()[1:5] == [str(master.pid), "master", "default", "0/6"]
    assert [row.split()[1:4] for row in rows[1:]] == [
        [str(c["pid"]), "child", str(c["index"])] for c in children
    ]

    identity = boss["identity"]
    assert operator.ctl("quiet", identity) == f"quiet: sent to {identity}\n"
    wait_until(
        lambda: all(title(p["pid"]).endswith("quiet") for p in (boss, *children)),
        timeout=1.0,
        message="master and children quiet within 1 s",
    )
    client = Client(redis_url, namespace=NAMESPACE)
    jid = client.push({"job": "tests.record", "args": ["held"]})
    queue = Queue("default", client)
    holds_for(1.0, lambda: queue.find(str(jid)) is not None, "a quiet child fetched")
    wait_until(
        lambda: all(p["quiet"] for p in operator.processes() if p["role"] == "child"),
        timeout=8,
        message="ps shows the children quiet",
    )

    assert operator.ctl("resume", "--all") == "resume: sent to 1 process\n"  # the master
    wait_until(lambda: store.sismember("test:done", "held"), timeout=5, message="job ran")

    assert operator.ctl("stop", identity) == f"stop: sent to {identity}\n"
    wait_until(lambda: stopping_or_gone(master), timeout=1.0, message="stopping within 1 s")
    assert master.wait(timeout=15) == exitcodes.REMOTE_STOP, master.log()
    assert not any(psutil.pid_exists(c["pid"]) for c in children)
