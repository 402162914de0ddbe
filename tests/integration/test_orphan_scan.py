"""The orphan scan: one scanner at a time across every process of every host.

Each scan reads every heartbeat; with every process scanning each interval
that is N squared reads a period. A lease in Redis lets one process scan per
interval, and a lost host's jobs are still recovered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.recovery import Recovery, RecoveryReport
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.heartbeat import Heartbeat
from jobmaster.worker.identity import Identity
from tests.helpers import wait_until

K = Keys()
PROCESSES = 8  # as many as a few hosts' children


@pytest.fixture
def heartbeats(make_config: Callable[..., Config]) -> Iterator[list[Heartbeat]]:
    """The heartbeats of PROCESSES worker processes (contexts of their own, as
    children of masters on several hosts have), not started: the test steps them."""
    config = make_config(heartbeat_ttl=2)  # a scan interval of 1 s
    made = []
    for index in range(PROCESSES):
        identity = Identity(hostname=f"host{index % 3}", nonce=f"{index:08x}")
        ctx = WorkerContext.create(config, identity)
        made.append(Heartbeat(ctx, dict, lambda command: None, threading.Event()))
    yield made
    for beat in made:
        beat.ctx.redis.close()


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The identities whose heartbeat ran an orphan scan, in order."""
    ran: list[str] = []
    scan = Recovery.recover_orphans

    def spy(self: Recovery, own_identity: str) -> dict[str, RecoveryReport]:
        ran.append(own_identity)
        return scan(self, own_identity)

    monkeypatch.setattr(Recovery, "recover_orphans", spy)
    return ran


def test_one_process_scans_per_interval_and_another_once_the_lease_expires(
    heartbeats: list[Heartbeat], scans: list[str], store: redis.Redis
) -> None:
    for beat in heartbeats:  # all in the same interval
        beat.step()
    assert len(scans) == 1, scans
    assert store.get(K.orphan_scan_lease) == scans[0].encode()
    for beat in heartbeats:  # a second beat of each, still within the lease
        beat.step()
    assert len(scans) == 1, scans

    wait_until(lambda: not store.exists(K.orphan_scan_lease), timeout=5)

    def all_due() -> bool:
        return all(beat._next_orphan_scan <= time.monotonic() for beat in heartbeats)

    wait_until(all_due, timeout=5)
    for beat in reversed(heartbeats):  # the first to try after the expiry wins
        beat.step()
    assert len(scans) == 2, scans
    assert scans[1] == heartbeats[-1].ctx.name


def test_the_scanner_still_recovers_an_expired_heartbeats_list(
    heartbeats: list[Heartbeat], scans: list[str], client: Client, store: redis.Redis
) -> None:
    jid = client.push({"job": "tests.record", "args": ["orphan"]})
    lost = "lost-host:99:deadbeef"
    store.sadd(K.processes, lost)
    store.lpush(K.inprogress(lost), store.rpop(K.queue("default")))  # no heartbeat: expired
    for beat in heartbeats:
        beat.step()
    assert len(scans) == 1
    assert store.llen(K.inprogress(lost)) == 0
    assert not store.sismember(K.processes, lost)
    assert [jid.encode() in raw for raw in store.lrange(K.queue("default"), 0, -1)] == [True]
