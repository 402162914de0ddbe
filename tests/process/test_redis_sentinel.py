"""Redis Sentinel: a real master keeps running jobs across a failover, none lost.

A primary, its replica and three sentinels run as private servers
(tests/sentinel.py). The master, its children (and jobs that enqueue jobs,
through the default client), a producer and ``jobmaster check`` all find
the primary through the sentinels. While a producer pushes
a steady stream of jobs, the primary is stopped; the sentinels promote the
replica; every job whose push was acknowledged, before and after, must run.

The primary is stopped with SHUTDOWN after ``WAIT 1``: since Redis 7.0,
SHUTDOWN also pauses writes and waits for the replicas to catch up, so
nothing it acknowledged is missing from the replica. A crash (SIGKILL) can
lose the writes not yet replicated, which is Redis's own limit (replication
is asynchronous; docs/redis-deployment.md), so that is not
what this test measures. The test jobs record their runs on the suite's
plain server (JOBMASTER_REDIS_URL), away from the failover.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from jobmaster.client import Client
from jobmaster.config import load_config
from jobmaster.embedded import find_redis_server
from jobmaster.errors import EnqueueError
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command, wait_for_worker
from tests.sentinel import MASTER_NAME, Deployment, deployment

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]
K = Keys()


def server_version() -> tuple[int, ...]:
    done = subprocess.run(
        [find_redis_server(), "--version"], capture_output=True, text=True, timeout=10, check=True
    )
    text = done.stdout.split("v=", 1)[1].split()[0]
    return tuple(int(part) for part in text.split("."))


@pytest.fixture
def sentinels(short_tmp_dir: Path) -> Iterator[Deployment]:
    if server_version() < (7, 0):
        pytest.skip("SHUTDOWN waits for replicas only since Redis 7.0: older ones may lose writes")
    with deployment(short_tmp_dir) as setup:
        yield setup


class Stream:
    """A producer pushing one job after another, each pushed until acknowledged.

    A push refused during the failover is tried again: the producer's own
    contract is that ``push`` returning a jid means Redis has the job.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self.acknowledged: list[str] = []
        self.failed_pushes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        number = 0
        while not self.stop.is_set():
            marker = f"s-{number}"
            try:
                self.client.push({"job": "tests.record", "args": [marker]})
            except EnqueueError:
                self.failed_pushes += 1
                self.stop.wait(0.05)  # the sentinels have not promoted the replica yet
                continue
            self.acknowledged.append(marker)
            number += 1
            self.stop.wait(0.02)

    def count(self) -> int:
        return len(self.acknowledged)


def test_workers_continue_on_the_promoted_replica_and_no_job_is_lost(
    sentinels: Deployment,
    store: redis.Redis,
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
) -> None:
    config = write_config(
        app=["tests.jobs", "tests.deployment_jobs"],
        processes=2,
        redis_sentinels=sentinels.addresses,
        redis_sentinel_master=MASTER_NAME,
    )
    master = run_jobmaster("-c", str(config))
    producer = Client.from_config(load_config(config, env={}))
    wait_for_worker(producer.redis, master)
    stream = Stream(producer)
    stream.thread.start()
    try:
        wait_until(lambda: stream.count() >= 50, timeout=10, message="jobs pushed")
        before = stream.count()

        with sentinels.primary.client() as primary:
            primary.set("test:fence", 1)  # WAIT counts from this connection's last write
            assert primary.execute_command("WAIT", 1, 1000) >= 1
        sentinels.primary.stop()  # SHUTDOWN: waits for the replica, then exits
        assert sentinels.replica.port is not None
        wait_until(
            lambda: sentinels.master_port() == sentinels.replica.port,
            timeout=30,
            interval=0.1,
            message=f"the sentinels promote the replica:\n{sentinels.logs()}",
        )
        promoted = stream.count()
        wait_until(lambda: stream.count() >= promoted + 50, timeout=15, message="pushes resume")
    finally:
        stream.stop.set()
        stream.thread.join(timeout=10)

    pushed = set(stream.acknowledged)
    assert before >= 50 and len(pushed) >= before + 50
    # A job enqueueing a job reaches the promoted primary too: the child's
    # default client follows the workers' settings, not JOBMASTER_REDIS_URL.
    producer.push_bulk({"job": "tests.enqueue_record", "args": [["parent-1"], ["parent-2"]]})
    pushed |= {"parent-1-child", "parent-2-child"}

    def missing() -> set[str]:
        ran = {key.decode() for key in store.hkeys("test:runs")}
        return pushed - ran

    wait_until(
        lambda: not missing(),
        timeout=20,
        message=f"jobs lost: {sorted(missing())[:10]}...\n{master.log()}",
    )
    assert master.popen.poll() is None, master.log()
    with sentinels.replica.client() as promoted_primary:
        assert promoted_primary.zcard(K.dead) == 0

    # The CLI goes through the sentinels too, to the promoted primary.
    checked = subprocess.run(
        [jobmaster_command(), "check", "-c", str(config)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    shown = f"Sentinel master '{MASTER_NAME}' via {','.join(sentinels.addresses)}"
    assert f"redis:       {shown} (database 0) (Redis " in checked.stdout
