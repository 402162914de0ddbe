"""Burying a poison pill is one step: dead set, unique lock, on_failure hook.

Three round trips before (TRANSFER, UNLOCK, PUSH): a master that died between
them left the lock held (no such job could be enqueued until its TTL) or the
hook never queued. Here the "master" dies right after its first script call.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
import redis

import jobmaster
from jobmaster.client import Client
from jobmaster.deadset import DeadSetLimits
from jobmaster.failure_hook import ON_FAILURE
from jobmaster.keys import Keys
from jobmaster.poison import crash_triage
from jobmaster.recovery import Recovery
from jobmaster.scripts import Scripts

K = Keys()
DYING = "host:1:dying"


def _failed(payload: dict[str, Any], error: BaseException) -> None:
    """Never run here: the hook runs later, in a worker."""


@jobmaster.job(name="tests.bury.unique_hooked", unique="until_executed", on_failure=_failed)
def unique_hooked(marker: str) -> None:
    """A unique job with an on_failure hook: what a poison pill's burial must all undo."""


class DiesAfterOneCall:
    """Scripts whose connection is gone after the first script call: a master
    killed in the middle of a burial."""

    def __init__(self, scripts: Scripts) -> None:
        self.calls = 0
        for name, script in vars(scripts).items():
            setattr(self, name, self._once(script))

    def _once(self, script: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.calls:
                raise redis.ConnectionError("the master died here")
            self.calls += 1
            return script(*args, **kwargs)

        return call


@pytest.fixture(autouse=True)
def _default_client(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobmaster.client, "_default", None)
    jobmaster.configure(redis_url)


def test_a_poison_pill_is_buried_its_lock_freed_and_its_hook_queued_in_one_call(
    client: Client, store: redis.Redis
) -> None:
    jid = unique_hooked.enqueue("pill")
    assert jid is not None and store.keys(K.unique("*"))
    raw = store.rpop(K.queue("default"))
    store.lpush(K.inprogress(DYING), raw)  # it was running in a child that died
    scripts = DiesAfterOneCall(client.scripts)
    recovery = Recovery(store, K, scripts, DeadSetLimits(100, 30), status_ttl=60)  # type: ignore[arg-type]

    with contextlib.suppress(redis.ConnectionError):  # the old, three-step burial died here
        report = recovery.requeue(K.inprogress(DYING), [raw], triage=crash_triage(1, "", "SIGKILL"))
        assert report.buried == [jid]

    assert scripts.calls == 1
    [dead] = [json.loads(entry) for entry in store.zrange(K.dead, 0, -1)]
    assert dead["jid"] == jid and "SIGKILL" in dead["dead_reason"]
    assert store.llen(K.inprogress(DYING)) == 0
    assert store.get(K.status(jid)) == b"dead"
    assert store.keys(K.unique("*")) == [], "the unique lock is still held"
    [hook] = [json.loads(entry) for entry in store.lrange(K.queue("default"), 0, -1)]
    assert hook["job"] == ON_FAILURE and hook["args"][0]["jid"] == jid
    assert unique_hooked.enqueue("pill") is not None  # free to be enqueued again


def test_a_lock_taken_by_a_newer_job_is_left_alone(client: Client, store: redis.Redis) -> None:
    jid = unique_hooked.enqueue("pill")
    raw = store.rpop(K.queue("default"))
    store.lpush(K.inprogress(DYING), raw)
    [lock] = store.keys(K.unique("*"))
    store.set(lock, "a-newer-jid")  # ours expired and another job took it
    recovery = Recovery(store, K, client.scripts, DeadSetLimits(100, 30), status_ttl=60)
    recovery.requeue(K.inprogress(DYING), [raw], triage=crash_triage(1, "", "SIGKILL"))
    assert store.zcard(K.dead) == 1 and store.get(lock) == b"a-newer-jid"
    assert jid is not None
