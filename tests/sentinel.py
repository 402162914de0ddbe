"""A Redis Sentinel deployment for tests: a primary, a replica and three sentinels.

Every process is a private ``redis-server`` child on a free loopback port in
a folder of its own (the sentinels run ``redis-server sentinel.conf
--sentinel``, the same binary, so no other package is needed). Timings are
short so that a failover takes seconds: a primary silent for 1 s is down,
two sentinels agreeing is enough.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from jobmaster.embedded import RedisServerProcess, find_redis_server
from tests.helpers import free_port, wait_until

MASTER_NAME = "mymaster"
QUORUM = 2


class SentinelProcess:
    """One ``redis-server --sentinel`` watching ``MASTER_NAME``."""

    def __init__(self, directory: Path, primary_port: int) -> None:
        self.directory = directory
        self.port = free_port()
        self.primary_port = primary_port
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=2.0, decode_responses=True
        )

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "sentinel.conf"  # a sentinel rewrites its own file
        conf.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.directory}\n"
            f"logfile {self.directory / 'sentinel.log'}\n"
            "sentinel resolve-hostnames no\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.primary_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
            f"sentinel failover-timeout {MASTER_NAME} 5000\n"
        )
        self._proc = subprocess.Popen(
            [find_redis_server(), str(conf), "--sentinel"],
            cwd=self.directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self._answers, timeout=10, interval=0.05, message=f"sentinel on {self.port}")

    def _answers(self) -> bool:
        assert self._proc is not None and self._proc.poll() is None, self.log()
        with contextlib.suppress(redis.RedisError), self.client() as conn:
            return bool(conn.ping())
        return False

    def log(self) -> str:
        path = self.directory / "sentinel.log"
        return path.read_text(errors="replace") if path.exists() else "(no log)"

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)


@dataclass
class Deployment:
    primary: RedisServerProcess
    replica: RedisServerProcess
    sentinels: list[SentinelProcess]

    @property
    def addresses(self) -> list[str]:
        return [sentinel.address for sentinel in self.sentinels]

    def master_port(self) -> int | None:
        """The primary's port as the first sentinel that answers sees it."""
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.RedisError), sentinel.client() as conn:
                address = conn.sentinel_get_master_addr_by_name(MASTER_NAME)
                return int(address[1]) if address else None
        return None

    def ready(self) -> bool:
        """Every sentinel sees the primary, the replica and the two other sentinels:
        then a failover can be agreed on."""
        for sentinel in self.sentinels:
            with sentinel.client() as conn:
                state = conn.sentinel_master(MASTER_NAME)
            if state["num-other-sentinels"] < len(self.sentinels) - 1 or state["num-slaves"] < 1:
                return False
        return True

    def logs(self) -> str:
        return "\n".join(f"--- sentinel {s.port}\n{s.log()}" for s in self.sentinels)


@contextlib.contextmanager
def deployment(folder: Path) -> Iterator[Deployment]:
    """Start the five processes, wait until the sentinels know each other; stop all after."""
    primary = RedisServerProcess(folder / "primary", port=free_port(), appendonly=False)
    assert primary.port is not None
    replica = RedisServerProcess(
        folder / "replica",
        port=free_port(),
        appendonly=False,
        extra_args=["--replicaof", "127.0.0.1", str(primary.port)],
    )
    sentinels = [SentinelProcess(folder / f"sentinel-{n}", primary.port) for n in range(3)]
    started: list[RedisServerProcess | SentinelProcess] = []
    try:
        for process in (primary, replica, *sentinels):
            process.start()
            started.append(process)
        with replica.client() as conn:
            wait_until(
                lambda: conn.info("replication").get("master_link_status") == "up",
                timeout=10,
                message="replica in sync",
            )
        setup = Deployment(primary, replica, sentinels)
        wait_until(setup.ready, timeout=20, interval=0.1, message="sentinels know each other")
        yield setup
    finally:
        for process in reversed(started):
            process.stop()
