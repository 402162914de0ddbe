"""The master's Redis thread (supervisor/duties.py) against a real private Redis.

What the unit tests' fakes cannot show: the keys it reads and writes, and
what it leaves of values others wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from jobmaster.config import Config
from jobmaster.deadset import DeadSetLimits
from jobmaster.keys import Keys
from jobmaster.periodic import PeriodicTicker
from jobmaster.recovery import Recovery
from jobmaster.scripts import Scripts
from jobmaster.supervisor import duties as duties_module
from jobmaster.supervisor.duties import MasterState, RedisDuties
from jobmaster.supervisor.history import HistoryRecorder

pytestmark = pytest.mark.timeout(60)
K = Keys()
MASTER = "host:1:master"


@pytest.fixture
def duties(make_config: Callable[..., Config]) -> Iterator[RedisDuties]:
    """A master's Redis thread, not started: the tests run its passes."""
    config = make_config()
    client = redis.Redis.from_url(config.redis_url)
    made = RedisDuties(
        config=config,
        client=client,
        keys=K,
        identity=MASTER,
        recovery=Recovery(client, K, Scripts(client), DeadSetLimits(100, 30), 60),
        ticker=PeriodicTicker(client, K, [], status_ttl=60),
        history=HistoryRecorder(client, K),
    )
    made.publish(MasterState(1, False, False, ()))
    yield made
    client.close()


def test_masters_whose_heartbeat_expired_are_pruned_from_the_set(
    duties: RedisDuties, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each unclean exit left its member in ``masters`` for good."""
    monkeypatch.setattr(duties_module, "PRUNE_SAMPLE", 3)  # fewer than the set: bounded
    gone = [f"host:{n}:gone" for n in range(5)]
    store.sadd(K.masters, *gone, "other:7:alive", b"\xff\xfe not text")
    store.hset(K.heartbeat("other:7:alive"), "role", "master")
    store.expire(K.heartbeat("other:7:alive"), 60)
    duties.run_pass(0.0)  # the heartbeat (ours added) and a first prune
    assert store.sismember(K.masters, MASTER)
    assert 8 - 3 <= store.scard(K.masters) < 8  # a bounded sample, of stale ones only
    assert store.sismember(K.masters, "other:7:alive")
    left = store.scard(K.masters)
    duties.run_pass(1.0)  # not due yet
    assert store.scard(K.masters) == left
    for n in range(1, 60):  # random samples: each prune removes what it drew
        duties.run_pass(n * duties_module.PRUNE_INTERVAL)
        if store.scard(K.masters) == 2:
            break
    assert store.smembers(K.masters) == {MASTER.encode(), b"other:7:alive"}
