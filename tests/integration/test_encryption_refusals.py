"""What whoever can write to Redis cannot do to an ``encrypt=True`` job (issue 16, item 12).

A cleartext payload for an encrypted job ran with the attacker's arguments;
it is now buried unread. A seal names its jid and job, so it cannot be moved
into another job's payload. A sealed payload pushed again whole (the same
jid) is a replay: it runs again, as docs/jobs.md says.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import redis

import jobmaster
from jobmaster import crypto
from jobmaster import payload as wire
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
K = Keys()
KEY = "the-current-key-0123456789abcdef"
StartWorker = Callable[[Config], WorkerProcess]


@pytest.fixture(autouse=True)
def _producer(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("JOBMASTER_REDIS_URL", redis_url)
    monkeypatch.setattr(jobmaster.client, "_default", None)  # restored after the test
    jobmaster.configure(redis_url, secret_key=KEY)
    yield
    crypto.set_keys(None)


def dead_reasons(store: redis.Redis) -> dict[str, str]:
    entries = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    return {str(e["jid"]): str(e["dead_reason"]) for e in entries}


def test_a_cleartext_payload_for_an_encrypted_job_is_buried_unrun(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    forged = wire.build("tests.encrypted", ["forged"], {"card": "attacker's"}, queue="default")
    client.push_payloads([forged])
    running_worker(make_config(secret_key=[KEY]))
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=10, message="forged payload buried")
    reason = dead_reasons(store)[str(forged["jid"])]
    assert "declared encrypt=True but its arguments are not sealed" in reason, reason
    jobs.encrypted.enqueue("after", card="fine")  # the worker keeps running sealed jobs
    wait_until(lambda: store.hget("test:encrypted", "after") == b"fine", timeout=10)
    assert store.hget("test:attempts", "forged") is None  # never ran


def test_a_seal_moved_to_another_jid_is_refused(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    jobs.encrypted.enqueue("original", card="x")
    [raw] = store.lrange(K.queue("default"), 0, -1)
    store.delete(K.queue("default"))
    moved = {**json.loads(raw), "jid": wire.new_jid()}
    client.push_payloads([moved])
    running_worker(make_config(secret_key=[KEY]))
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=10, message="moved seal buried")
    assert "authentication failed" in dead_reasons(store)[str(moved["jid"])]
    assert store.hget("test:attempts", "original") is None
