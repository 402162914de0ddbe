"""``jobmaster.result``: reading and waiting for a job's end, on a real Redis.

The job's end is written here as the worker's FINISH writes it (status,
result, attempt, then a message on the job's ended channel), so that the
waiting protocol is tested on its own; tests/process/test_results.py runs
real jobs through a real master.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

import jobmaster
from jobmaster import results
from jobmaster.cli import main
from jobmaster.client import Client
from jobmaster.deadset import DeadSetLimits
from jobmaster.keys import Keys
from jobmaster.poison import crash_triage
from jobmaster.recovery import Recovery
from jobmaster.scripts import Finish
from tests.helpers import wait_until

K = Keys()
JID = "0123456789abcdef01234567"

pytestmark = pytest.mark.timeout(30)


def end(
    store: redis.Redis,
    jid: str,
    status: str,
    result: Any = None,
    *,
    error: tuple[str, str] | None = None,
    publish: bool = True,
) -> None:
    """Write a job's end as FINISH does: status, result (if not None), last attempt, message."""
    pipe = store.pipeline(transaction=True)
    pipe.set(K.status(jid), status, ex=60)
    if result is not None:
        pipe.set(K.result(jid), json.dumps(result), ex=60)
    attempt = {
        "started_at": time.time() - 1,
        "ended_at": time.time(),
        "outcome": status,
        "error_class": error[0] if error else None,
        "error_message": error[1] if error else None,
        "worker": "host:1:abc",
    }
    pipe.rpush(K.attempts(jid), json.dumps(attempt))
    pipe.execute()
    if publish:
        store.publish(K.ended_channel(jid), status)


def calls(store: redis.Redis) -> Counter[str]:
    """Commands Redis has executed so far, by name (INFO commandstats)."""
    stats = store.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


@pytest.fixture
def working(store: redis.Redis) -> Iterator[str]:
    store.set(K.status(JID), "working", ex=60)
    yield JID


def test_a_complete_job_returns_its_value(client: Client, store: redis.Redis) -> None:
    end(store, JID, "complete", {"total": 3, "items": [1, 2]})
    assert client.result(JID) == {"total": 3, "items": [1, 2]}
    assert client.result(JID, wait=5) == {"total": 3, "items": [1, 2]}


def test_a_complete_job_without_a_stored_result_returned_none(
    client: Client, store: redis.Redis
) -> None:
    end(store, JID, "complete")
    assert client.result(JID) is None


def test_an_unknown_jid_raises_unknown_job_a_lookup_error(client: Client) -> None:
    with pytest.raises(jobmaster.UnknownJob) as raised:
        client.result(JID, wait=3)
    assert isinstance(raised.value, LookupError)
    assert raised.value.jid == JID


def test_a_dead_job_raises_job_failed_with_its_last_error(
    client: Client, store: redis.Redis
) -> None:
    end(store, JID, "dead", error=("ValueError", "failing on purpose"))
    with pytest.raises(jobmaster.JobFailed) as raised:
        client.result(JID)
    failed = raised.value
    assert (failed.status, failed.error_class, failed.error_message) == (
        "dead",
        "ValueError",
        "failing on purpose",
    )
    assert "ValueError: failing on purpose" in str(failed)


def test_a_poison_pill_takes_its_error_from_the_dead_set(
    client: Client, store: redis.Redis
) -> None:
    """Buried by the master: no attempt says why (the last one, if any, was a
    retry of an earlier error), the dead-set entry does."""
    end(store, JID, "retrying", error=("ValueError", "an earlier failure"), publish=False)
    store.set(K.status(JID), "dead")
    reason = "the worker process died while running this job 3 times: SIGKILL"
    entry = {"jid": JID, "job": "x", "crash_count": 3, "dead_reason": reason}
    store.zadd(K.dead, {json.dumps({"jid": "f" * 24, "job": "other"}): 1, json.dumps(entry): 2})
    with pytest.raises(jobmaster.JobFailed) as raised:
        client.result(JID)
    assert (raised.value.error_class, raised.value.error_message) == ("PoisonPill", reason)


@pytest.mark.parametrize("status", ["failed", "cancelled", "expired", "skipped"])
def test_other_ends_without_a_result_raise_job_failed(
    client: Client, store: redis.Redis, status: str
) -> None:
    store.set(K.status(JID), status)
    with pytest.raises(jobmaster.JobFailed) as raised:
        client.result(JID)
    assert raised.value.status == status
    assert raised.value.error_class is None and raised.value.error_message is None


def test_a_job_not_ended_raises_result_pending_a_timeout_error(
    client: Client, working: str
) -> None:
    with pytest.raises(jobmaster.ResultPending) as at_once:
        client.result(working)
    assert isinstance(at_once.value, TimeoutError) and at_once.value.status == "working"
    started = time.monotonic()
    with pytest.raises(jobmaster.ResultPending):
        client.result(working, wait=0.5)
    assert 0.5 <= time.monotonic() - started < 3


def test_a_waiter_wakes_when_the_job_ends(client: Client, store: redis.Redis, working: str) -> None:
    ended_at: list[float] = []

    def finish() -> None:
        time.sleep(0.3)
        end(store, working, "complete", [1, "two"])
        ended_at.append(time.monotonic())

    writer = threading.Thread(target=finish)
    writer.start()
    try:
        assert client.result(working, wait=20) == [1, "two"]
        woke = time.monotonic()
    finally:
        writer.join()
    assert woke - ended_at[0] < 0.5  # a pub/sub hop, not RECHECK_EVERY (5 s)


def test_several_waiters_all_wake(client: Client, store: redis.Redis, working: str) -> None:
    got: list[Any] = []
    waiters = [
        threading.Thread(target=lambda: got.append(client.result(working, wait=20)))
        for _ in range(3)
    ]
    for waiter in waiters:
        waiter.start()
    wait_until(lambda: store.pubsub_numsub(K.ended_channel(working))[0][1] == 3, timeout=5)
    started = time.monotonic()
    end(store, working, "complete", 7)
    for waiter in waiters:
        waiter.join(timeout=10)
    assert got == [7, 7, 7] and time.monotonic() - started < 2


def test_an_end_between_the_first_read_and_the_subscription_is_not_missed(
    client: Client, store: redis.Redis, working: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lost wake-up: the job ends (and publishes to nobody) after the first
    read saw it working. The read made once subscribed sees it."""
    real_read = results.read
    reads: list[str | None] = []

    def read_then_end(*args: Any) -> results.Snapshot:
        found = real_read(*args)
        if not reads:
            end(store, working, "complete", "late")  # published before we listen
        reads.append(found.status)
        return found

    monkeypatch.setattr(results, "read", read_then_end)
    started = time.monotonic()
    assert client.result(working, wait=20) == "late"
    assert time.monotonic() - started < 2  # not a RECHECK_EVERY later
    assert reads == ["working", "complete"]


def test_a_lost_message_costs_a_recheck_not_the_whole_wait(
    client: Client, store: redis.Redis, working: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "RECHECK_EVERY", 0.5)
    timer = threading.Timer(0.3, lambda: end(store, working, "complete", 1, publish=False))
    timer.start()
    started = time.monotonic()
    try:
        assert client.result(working, wait=20) == 1
    finally:
        timer.cancel()
    assert time.monotonic() - started < 3


def test_waiting_sends_a_handful_of_commands_not_a_poll(
    client: Client, store: redis.Redis, working: str
) -> None:
    before = calls(store)
    with pytest.raises(jobmaster.ResultPending):
        client.result(working, wait=2)
    spent = calls(store) - before
    spent["info"] -= 1  # the "before" INFO
    # Three reads of three commands (before, once subscribed, at the deadline),
    # SUBSCRIBE, and the handshakes of new connections: a 10 ms poll would be 600.
    assert spent["get"] + spent["lindex"] <= 9 and spent["subscribe"] == 1, spent
    assert sum(spent.values()) <= 20, spent


def test_values_someone_forged_read_as_absent_not_raised(
    client: Client, store: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    store.hset(K.status(JID), "x", "y")  # another type
    with pytest.raises(jobmaster.UnknownJob):
        client.result(JID)
    store.delete(K.status(JID))
    end(store, JID, "complete")
    store.set(K.result(JID), b"\xff not json")
    with caplog.at_level(logging.WARNING, logger="jobmaster.results"):
        assert client.result(JID) is None
    assert f"result of jid={JID} is not JSON" in caplog.text
    other = "1" * 24
    store.set(K.status(other), "dead")
    store.set(K.dead, "not a sorted set")
    with pytest.raises(jobmaster.JobFailed) as raised:
        client.result(other)
    assert raised.value.error_class is None


def test_the_module_function_uses_the_default_client(
    redis_url: str, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jobmaster.client._default", Client(redis_url))
    end(store, JID, "complete", "via default")
    assert jobmaster.result(JID, wait=1) == "via default"


# -- shown by ``jobmaster status JID`` -------------------------------------------
def status_command(redis_url: str, *args: str) -> str:
    answer = CliRunner().invoke(main, ["status", *args, "--redis-url", redis_url])
    assert answer.exit_code == 0, answer.output
    return answer.output


def test_jobmaster_status_shows_a_complete_jobs_result(redis_url: str, store: redis.Redis) -> None:
    end(store, JID, "complete", {"sent": 3})
    assert "  result: " + json.dumps({"sent": 3}) in status_command(redis_url, JID)
    shown = json.loads(status_command(redis_url, JID, "--json"))
    assert shown["status"] == "complete" and shown["result"] == {"sent": 3}
    none = "1" * 24
    end(store, none, "complete")
    assert "  result: None" in status_command(redis_url, none)
    assert json.loads(status_command(redis_url, none, "--json"))["result"] is None
    dead = "2" * 24
    end(store, dead, "dead", error=("ValueError", "boom"))
    assert "result" not in status_command(redis_url, dead)
    assert "result" not in json.loads(status_command(redis_url, dead, "--json"))


def test_jobmaster_status_reads_a_huge_result_only_in_part(
    redis_url: str, store: redis.Redis
) -> None:
    end(store, JID, "complete")
    store.set(K.result(JID), json.dumps(["x" * (10 * 1024 * 1024)]))
    text = status_command(redis_url, JID)
    assert "bytes in all)" in text and len(text) < 100 * 1024
    shown = json.loads(status_command(redis_url, JID, "--json"))
    assert len(shown["result"]) == results.SHOW_BYTES and shown["result_bytes"] > 10**7


# -- what the scripts write: FINISH (the worker) and BURY (the master) -------------
INPROG = K.inprogress("host:1:abc")


def finish_call(raw: bytes, result: bytes, channel: str, *, status: str = "complete") -> Finish:
    return Finish(
        inprogress_key=INPROG,
        processed_key=K.stat("processed"),
        processed_day_key=K.stat("processed") + ":d",
        failed_key=K.stat("failed"),
        failed_day_key=K.stat("failed") + ":d",
        target_key=K.dead,
        status_key=K.status(JID),
        attempts_key=K.attempts(JID),
        lock_key=K.unique("-"),
        result_key=K.result(JID),
        payload=raw,
        failed="0",
        day_ttl=100,
        target_kind="",
        stored=b"",
        score=0,
        dead_cap=10,
        dead_cutoff=0,
        status=status,
        attempt=json.dumps({"outcome": status}),
        status_ttl=120,
        lock_action="",
        jid=JID,
        lock_ttl=0,
        result=result,
        ended_channel=channel,
        waiter_key=K.result_waiter(JID),
    )


def listening(store: redis.Redis, channel: str) -> Any:
    pubsub = store.pubsub()
    pubsub.subscribe(channel)
    assert message(pubsub, "subscribe") == 1
    return pubsub


def message(pubsub: Any, kind: str = "message", timeout: float = 5) -> Any:
    """The data of the next message of ``kind``; None if none came within ``timeout``."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        found = pubsub.get_message(timeout=left)
        if found is not None and found["type"] == kind:
            return found["data"]
    return None


def test_an_end_nobody_waits_for_is_not_published(client: Client, store: redis.Redis) -> None:
    """No waiter's key: no PUBLISH (a command per job that nobody heard)."""
    pubsub = listening(store, K.ended_channel(JID))
    store.lpush(INPROG, b"job")
    finish_call(b"job", b'{"a":1}', K.ended_channel(JID)).run(client.scripts.finish)
    assert store.get(K.status(JID)) == b"complete"
    assert message(pubsub, timeout=0.5) is None
    pubsub.close()


def test_a_waiting_result_sets_its_key_and_is_woken_by_the_end(
    client: Client, store: redis.Redis
) -> None:
    store.set(K.status(JID), "working")
    store.lpush(INPROG, b"job")
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(client.result(JID, wait=20)))
    waiter.start()
    wait_until(lambda: store.exists(K.result_waiter(JID)), timeout=5, message="waiter's key")
    assert 20 < store.ttl(K.result_waiter(JID)) <= 25  # the wait and a margin
    wait_until(lambda: store.pubsub_numsub(K.ended_channel(JID))[0][1] == 1, timeout=5)
    began = time.monotonic()
    finish_call(b"job", b'{"b":2}', K.ended_channel(JID)).run(client.scripts.finish)
    waiter.join(10)
    assert got == [{"b": 2}]
    assert time.monotonic() - began < 2  # woken by the message, not the 5 s recheck


def test_finish_stores_the_result_with_the_status_ttl_and_publishes_the_end(
    client: Client, store: redis.Redis
) -> None:
    pubsub = listening(store, K.ended_channel(JID))
    store.lpush(INPROG, b"job")
    store.set(K.result_waiter(JID), 1, ex=60)  # as result(jid, wait=...) does first
    finish_call(b"job", b'{"a":1}', K.ended_channel(JID)).run(client.scripts.finish)
    assert message(pubsub) == b"complete"
    assert store.get(K.result(JID)) == b'{"a":1}'
    assert 110 < store.ttl(K.result(JID)) <= 120 and 110 < store.ttl(K.status(JID)) <= 120
    assert client.result(JID) == {"a": 1}
    pubsub.close()


def test_finish_without_a_result_or_channel_writes_and_sends_neither(
    client: Client, store: redis.Redis
) -> None:
    pubsub = listening(store, K.ended_channel(JID))
    store.lpush(INPROG, b"job")
    finish_call(b"job", b"", "", status="retrying").run(client.scripts.finish)
    assert store.get(K.status(JID)) == b"retrying" and not store.exists(K.result(JID))
    assert message(pubsub, timeout=0.3) is None
    # Not ours any more (pushed back, recovered): nothing written, nothing sent.
    finish_call(b"job", b"1", K.ended_channel(JID)).run(client.scripts.finish)
    assert not store.exists(K.result(JID)) and message(pubsub, timeout=0.3) is None
    pubsub.close()


def test_a_job_buried_by_the_master_wakes_its_waiter_as_dead(
    client: Client, store: redis.Redis
) -> None:
    payload = {"jid": JID, "job": "tests.x", "args": [], "queue": "default"}
    raw = json.dumps(payload).encode()
    store.set(K.status(JID), "working")
    store.lpush(INPROG, raw)
    recovery = Recovery(store, K, client.scripts, DeadSetLimits(100, 30), status_ttl=60)
    got: list[BaseException] = []

    def wait() -> None:
        try:
            client.result(JID, wait=20)
        except jobmaster.JobFailed as failed:
            got.append(failed)

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: store.pubsub_numsub(K.ended_channel(JID))[0][1] == 1, timeout=5)
    started = time.monotonic()
    recovery.requeue(INPROG, [raw], triage=crash_triage(1, "", "SIGKILL"))
    waiter.join(timeout=10)
    assert time.monotonic() - started < 2  # woken by BURY's message, not a recheck
    [failed] = got
    assert isinstance(failed, jobmaster.JobFailed) and failed.status == "dead"
    assert failed.error_class == "PoisonPill"
    assert failed.error_message == "the worker process died while running this job once: SIGKILL"


def test_a_cancelled_waiting_job_wakes_its_waiter_with_job_failed(
    client: Client, store: redis.Redis
) -> None:
    jid = client.push({"job": "tests.results.add", "args": [1, 2]})  # no worker: it waits
    assert jid is not None
    got: list[BaseException] = []

    def wait() -> None:
        try:
            client.result(jid, wait=20)
        except jobmaster.JobFailed as failed:
            got.append(failed)

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: store.pubsub_numsub(K.ended_channel(jid))[0][1] == 1, timeout=5)
    started = time.monotonic()
    assert jobmaster.cancel(jid, client)
    waiter.join(timeout=10)
    assert time.monotonic() - started < 2  # woken by CANCEL's message, not a recheck
    [failed] = got
    assert isinstance(failed, jobmaster.JobFailed) and failed.status == "cancelled"
