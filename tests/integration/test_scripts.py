"""Each Lua script against a real Redis: what moves, what stays, what is counted."""

from __future__ import annotations

import json

import pytest
import redis

from jobmaster.keys import Keys
from jobmaster.scripts import Fetch, Finish, Mark, Push, Scripts, Transfer

K = Keys()
INPROG = K.inprogress("host:1:abc")


@pytest.fixture
def scripts(store: redis.Redis) -> Scripts:
    return Scripts(store)


def fetch(scripts: Scripts, queues: list[str], count: int = 1) -> list[object] | None:
    call = Fetch(INPROG, K.paused, count, [(q, K.queue(q)) for q in queues])
    return call.run(scripts.fetch)  # type: ignore[no-any-return]


def test_fetch_moves_the_oldest_job_into_the_inprogress_list(
    store: redis.Redis, scripts: Scripts
) -> None:
    store.lpush(K.queue("a"), b"first", b"second")
    raw, queue = fetch(scripts, ["a"])  # type: ignore[misc]
    assert (raw, queue) == (b"first", b"a")
    assert store.lrange(INPROG, 0, -1) == [b"first"]
    assert store.lrange(K.queue("a"), 0, -1) == [b"second"]


def test_fetch_takes_queues_in_the_given_order_and_skips_paused(
    store: redis.Redis, scripts: Scripts
) -> None:
    store.lpush(K.queue("a"), b"from-a")
    store.lpush(K.queue("b"), b"from-b")
    assert fetch(scripts, ["b", "a"])[0] == b"from-b"  # type: ignore[index]
    store.sadd(K.paused, "a")
    assert fetch(scripts, ["a", "b"]) is None
    store.srem(K.paused, "a")
    assert fetch(scripts, ["a", "b"])[0] == b"from-a"  # type: ignore[index]


def test_fetch_takes_several_jobs_in_one_step_across_queues_in_order(
    store: redis.Redis, scripts: Scripts
) -> None:
    store.lpush(K.queue("a"), b"a1", b"a2")
    store.lpush(K.queue("b"), b"b1", b"b2", b"b3")
    store.lpush(K.queue("p"), b"p1")
    store.sadd(K.paused, "p")
    taken = fetch(scripts, ["a", "p", "b"], count=4)
    assert taken == [b"a1", b"a", b"a2", b"a", b"b1", b"b", b"b2", b"b"]
    assert store.lrange(INPROG, 0, -1) == [b"b2", b"b1", b"a2", b"a1"]
    assert fetch(scripts, ["a", "p", "b"], count=4) == [b"b3", b"b"]  # fewer: b ran dry
    store.lpush(K.queue("a"), b"a3", b"a4", b"a5")
    assert fetch(scripts, ["a"], count=2) == [b"a3", b"a", b"a4", b"a"]  # two LMOVEs
    assert fetch(scripts, ["a"], count=2) == [b"a5", b"a"]
    assert store.lrange(INPROG, 0, -1)[:3] == [b"a5", b"a4", b"a3"]
    assert fetch(scripts, ["a", "p", "b"], count=4) is None
    assert store.llen(K.queue("p")) == 1


def finish(
    scripts: Scripts,
    raw: bytes,
    failed: bool,
    target: str,
    stored: bytes = b"",
    score: float = 0,
    cap: int = 10,
    cutoff: float = 0,
) -> int:
    call = Finish(
        inprogress_key=INPROG,
        processed_key=K.stat("processed"),
        processed_day_key=K.stat("processed") + ":d",
        failed_key=K.stat("failed"),
        failed_day_key=K.stat("failed") + ":d",
        target_key=K.retry if target == "retry" else K.dead,
        status_key=K.status("j1"),
        attempts_key=K.attempts("j1"),
        lock_key=K.unique("d1"),
        result_key=K.result("j1"),
        payload=raw,
        failed="1" if failed else "0",
        day_ttl=100,
        target_kind=target,
        stored=stored,
        score=score,
        dead_cap=cap,
        dead_cutoff=cutoff,
        status="complete",
        attempt='{"outcome": "complete"}',
        status_ttl=60,
        lock_action="",
        jid="j1",
        lock_ttl=0,
    )
    return int(call.run(scripts.finish))


def test_finish_acknowledges_and_counts(store: redis.Redis, scripts: Scripts) -> None:
    store.lpush(INPROG, b"job")
    assert finish(scripts, b"job", failed=False, target="") == 1
    assert store.llen(INPROG) == 0
    assert store.get(K.stat("processed")) == b"1" and store.get(K.stat("failed")) is None
    assert 0 < store.ttl(K.stat("processed") + ":d") <= 100
    assert finish(scripts, b"job", failed=False, target="") == 0  # already acknowledged


def test_finish_retry_stores_the_new_payload_atomically(
    store: redis.Redis, scripts: Scripts
) -> None:
    store.lpush(INPROG, b"job")
    finish(scripts, b"job", failed=True, target="retry", stored=b"job+error", score=123)
    assert store.llen(INPROG) == 0
    assert store.zrange(K.retry, 0, -1, withscores=True) == [(b"job+error", 123.0)]
    assert store.get(K.stat("failed")) == b"1"


def test_finish_dead_trims_by_count_and_age(store: redis.Redis, scripts: Scripts) -> None:
    for n in range(5):
        store.zadd(K.dead, {f"old{n}": 10 + n})
    store.lpush(INPROG, b"job")
    finish(
        scripts, b"job", failed=True, target="dead", stored=b"dead-job", score=100, cap=3, cutoff=12
    )
    # Entries older than the cutoff went, then the oldest beyond the cap.
    assert store.zrange(K.dead, 0, -1) == [b"old3", b"old4", b"dead-job"]


def transfer(
    scripts: Scripts,
    source: str,
    kind: str,
    raw: bytes,
    target: str,
    where: str,
    new: bytes | None = None,
) -> int:
    return int(
        Transfer(
            source_key=source,
            target_key=target,
            queues_key=K.queues,
            status_key=K.status("j1"),
            source_kind=kind,
            entry=raw,
            stored=new or raw,
            target_kind=where,
            score=5,
            queue="q",
            wakeup_channel=K.wakeup_channel("q"),
            cap=0,
            cutoff="-inf",
            status="queued",
            status_ttl=60,
        ).run(scripts.transfer)
    )


def test_transfer_moves_only_if_the_entry_is_still_there(
    store: redis.Redis, scripts: Scripts
) -> None:
    store.lpush(INPROG, b"job")
    store.rpush(K.queue("q"), b"waiting")
    assert transfer(scripts, INPROG, "list", b"job", K.queue("q"), "front", b"job2") == 1
    # Front of the queue is its right end: the requeued job is fetched next.
    assert store.lrange(K.queue("q"), 0, -1) == [b"waiting", b"job2"]
    assert transfer(scripts, INPROG, "list", b"job", K.queue("q"), "front") == 0
    assert store.llen(K.queue("q")) == 2  # a second recoverer pushes nothing


def test_transfer_from_a_sorted_set_to_the_back_of_a_queue(
    store: redis.Redis, scripts: Scripts
) -> None:
    store.zadd(K.scheduled, {b"due": 1})
    store.rpush(K.queue("q"), b"waiting")
    assert transfer(scripts, K.scheduled, "zset", b"due", K.queue("q"), "back") == 1
    assert store.lrange(K.queue("q"), 0, -1) == [b"due", b"waiting"]
    assert store.zcard(K.scheduled) == 0


def test_push_script_handles_more_payloads_than_unpack_allows(
    store: redis.Redis, scripts: Scripts
) -> None:
    payloads = [json.dumps({"n": n}).encode() for n in range(1000)]
    count = Push(K.queue("q"), K.queues, "q", "chan", 0, payloads).run(scripts.push)
    assert count == 1000 and store.llen(K.queue("q")) == 1000


def test_status_follows_the_job_through_push_fetch_and_finish(
    store: redis.Redis, scripts: Scripts
) -> None:
    payload = json.dumps({"jid": "j1", "job": "x", "args": [], "queue": "q"}).encode()
    Push(K.queue("q"), K.queues, "q", "chan", 60, [payload], [K.status("j1")]).run(scripts.push)
    # no TTL while it waits: scripts.py, "Status lifetimes"
    assert store.get(K.status("j1")) == b"queued" and store.ttl(K.status("j1")) == -1
    fetch(scripts, ["q"])
    assert store.get(K.status("j1")) == b"queued"  # FETCH writes no key it is not given
    assert Mark(INPROG, [(K.status("j1"), payload, 59_000)]).run(scripts.mark) == 1
    assert store.get(K.status("j1")) == b"working" and 58 <= store.ttl(K.status("j1")) <= 59
    finish(scripts, payload, failed=False, target="")
    assert store.get(K.status("j1")) == b"complete"
    assert [json.loads(a) for a in store.lrange(K.attempts("j1"), 0, -1)] == [
        {"outcome": "complete"}
    ]
    assert 0 < store.ttl(K.attempts("j1")) <= 60


def test_mark_leaves_a_job_no_longer_in_progress_as_it_is(
    store: redis.Redis, scripts: Scripts
) -> None:
    """A job pushed back (or recovered, or acknowledged) before its mark went out
    keeps its status: the mark never says "working" of a job nobody runs."""
    store.lpush(INPROG, b"still-here")
    store.set(K.status("gone"), "queued")
    marks = [(K.status("gone"), b"gone", 5000), (K.status("here"), b"still-here", 5000)]
    marked = Mark(INPROG, marks).run(scripts.mark)
    assert marked == 1
    assert store.get(K.status("gone")) == b"queued"
    assert store.get(K.status("here")) == b"working"


def test_fetch_survives_a_payload_that_is_not_json(store: redis.Redis, scripts: Scripts) -> None:
    store.lpush(K.queue("q"), b"\xff not json")
    raw, _ = fetch(scripts, ["q"])  # type: ignore[misc]
    assert raw == b"\xff not json"  # moved, for the worker to bury; no status written
    assert store.keys(K.status("*")) == []
