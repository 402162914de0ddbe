"""What the operator's commands and the dashboard show when Redis holds forged values.

SPEC §8: every value read from Redis may be corrupt or forged. A counter
that is ``inf`` or ``nan``, a score of ``+inf``, a heartbeat whose pid is
``nan``: each command and each page still answers (the value shown as
unknown), and the forged entry can still be deleted.
"""

from __future__ import annotations

import json
import re
import time
import tracemalloc
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner, Result
from starlette.testclient import TestClient

from jobmaster import payload as wire
from jobmaster.cli import main
from jobmaster.config import load_config
from jobmaster.keys import Keys
from jobmaster.web import create_app

pytestmark = pytest.mark.timeout(60)
LOCAL = "http://localhost"  # a Host the dashboard answers for (door.py)
K = Keys()
PAGES = ["/", "/busy", "/queues", "/stats.json", "/scheduled", "/retries", "/dead", "/batches"]


@pytest.fixture
def store(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


@pytest.fixture
def web(redis_url: str) -> Iterator[TestClient]:
    config = load_config(None, {"redis_url": redis_url})
    with TestClient(create_app(config), base_url=LOCAL, follow_redirects=False) as test_client:
        yield test_client


def run(redis_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--redis-url", redis_url])


def forge_non_finite(store: redis.Redis) -> str:
    """inf and nan counters, +inf and -inf scores, a heartbeat with a nan pid;
    returns the jid of the entry scheduled at +inf."""
    store.mset({K.stat("failed"): "inf", K.stat("processed"): "nan"})
    payload = wire.build("tests.record", ["forever"], {}, queue="default")
    store.zadd(K.scheduled, {wire.encode(payload): float("inf")})
    retry = wire.build("tests.record", [], {}, queue="default")
    store.zadd(K.retry, {wire.encode(retry): float("-inf")})
    dead = {**wire.build("tests.record", [], {}, queue="default"), "died_at": 1e308}
    store.zadd(K.dead, {json.dumps(dead).encode(): 1e308})
    identity = "forged:1:abc"
    store.sadd(K.processes, identity)
    fields = {"pid": "nan", "busy": "inf", "beat_at": "nan", "started_at": "-inf"}
    store.hset(K.heartbeat(identity), mapping={**fields, "memory_mb": "nan", "hostname": "h"})
    store.expire(K.heartbeat(identity), 60)
    store.hset(K.batch("b1"), mapping={"created_at": "1e300", "total": "nan", "pending": "inf"})
    store.hset(K.batch("b1"), mapping={"complete_at": "-inf", "description": "forged"})
    store.zadd(K.batches, {"b1": float("inf")})
    return str(payload["jid"])


def test_commands_answer_and_the_forged_entry_can_be_deleted(
    redis_url: str, store: redis.Redis
) -> None:
    jid = forge_non_finite(store)
    commands = [["stats"], ["stats", "--json"], ["ps"], ["ps", "--json"]]
    commands += [["batches", "list"], ["batches", "show", "b1"]]
    for args in commands:
        result = run(redis_url, *args)
        assert result.exit_code == 0, (args, result.output, result.exception)
    for kind in ("scheduled", "retries", "dead"):
        for args in ([kind, "list"], [kind, "list", "--json"]):
            result = run(redis_url, *args)
            assert result.exit_code == 0, (args, result.output, result.exception)
    shown = run(redis_url, "scheduled", "show", jid)
    assert shown.exit_code == 0, (shown.output, shown.exception)
    deleted = run(redis_url, "scheduled", "delete", jid)
    assert deleted.exit_code == 0, (deleted.output, deleted.exception)
    assert store.zcard(K.scheduled) == 0
    listed = json.loads(run(redis_url, "retries", "list", "--json").output)
    assert (listed[0]["at"], listed[0]["score"]) == (None, "-inf")


def test_pages_answer(web: TestClient, store: redis.Redis) -> None:
    jid = forge_non_finite(store)
    for path in [*PAGES, f"/jobs/{jid}", "/scheduled?q=tests"]:
        answer = web.get(path)
        assert answer.status_code == 200, (path, answer.text[:500])
    stats = json.loads(web.get("/stats.json").text)  # valid JSON: no NaN, no Infinity
    assert (stats["processed"], stats["failed"], stats["busy"]) == (0, 0, 0)


# -- terminal escapes (item 11) -------------------------------------------------
OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # sets the terminal's clipboard
EVIL = f"{OSC52}job\rhidden\x1b[2J\x9b31m\u202eevil"
RAW = set("\x1b\x07\r\x9b\u202e")


def forge_escapes(store: redis.Redis) -> str:
    """Control characters in every field an operator's command prints; the jid."""
    payload = wire.build(EVIL, [EVIL], {"k": EVIL}, queue="default")
    payload |= {"error_class": EVIL, "error_message": EVIL, "error_backtrace": [EVIL]}
    store.zadd(K.dead, {wire.encode(payload): time.time()})
    store.zadd(K.retry, {f"not json {EVIL}".encode(): time.time() + 60})
    store.rpush(K.queue(EVIL), wire.encode(payload))
    store.sadd(K.queues, EVIL)
    identity = f"{EVIL}:1:abc"
    store.sadd(K.processes, identity)
    store.hset(K.heartbeat(identity), mapping={"pid": "1", "hostname": EVIL, "queues": EVIL})
    store.expire(K.heartbeat(identity), 60)
    store.hset(K.batch("b2"), mapping={"created_at": time.time(), "description": EVIL})
    store.zadd(K.batches, {"b2": time.time()})
    return str(payload["jid"])


def test_commands_never_print_terminal_control_characters(
    redis_url: str, store: redis.Redis
) -> None:
    jid = forge_escapes(store)
    commands = [["stats"], ["ps"], ["queue", "list"], ["batches", "list"]]
    commands += [["batches", "show", "b2"], ["dead", "show", jid]]
    for kind in ("dead", "retries"):
        commands += [[kind, "list"], [kind, "list", "--json"]]
    for args in commands:
        result = run(redis_url, *args)
        assert result.exit_code == 0, (args, result.output, result.exception)
        assert not RAW & set(result.output), (args, result.output)
    shown = run(redis_url, "dead", "show", jid).output
    assert "\\x1b]52;c;cHduZWQ=\\x07job\\x0dhidden" in shown  # shown, as text


# -- huge entries (item 4: the CLI and the dashboard) -----------------------------
HUGE = 32 * 1024 * 1024  # bytes of the forged entry (the review used 100 MB)


def forge_huge(store: redis.Redis) -> str:
    """A valid payload 32 MB long in the dead set, beside a small one; its jid."""
    payload = wire.build("tests.record", ["x" * HUGE], {}, queue="default")
    payload |= {"error_class": "ValueError", "error_message": "big", "died_at": time.time()}
    store.zadd(K.dead, {wire.encode(payload): time.time() - 60})
    store.zadd(K.dead, {wire.encode(wire.build("tests.record", [1], {}, queue="q")): time.time()})
    return str(payload["jid"])


def test_a_huge_entry_is_listed_without_being_read_whole(
    redis_url: str, store: redis.Redis
) -> None:
    jid = forge_huge(store)
    tracemalloc.start()
    try:
        listed = run(redis_url, "dead", "list", "--limit", "1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert listed.exit_code == 0, (listed.output, listed.exception)
    assert peak < HUGE // 4, f"listing one entry took {peak:,} bytes"
    assert jid in listed.output and "too long to read" in listed.output, listed.output
    assert len(run(redis_url, "dead", "list", "--json").output) < 1024 * 1024
    shown = run(redis_url, "dead", "show", jid)
    assert shown.exit_code == 0 and len(shown.output) < 1024 * 1024, shown.exception
    assert re.search(r"truncated: [\d,]+ bytes in all", shown.output), shown.output[-300:]
    deleted = run(redis_url, "dead", "delete", jid)
    assert deleted.exit_code == 0 and store.zcard(K.dead) == 1, deleted.output


def test_a_huge_entry_makes_small_pages(web: TestClient, store: redis.Redis) -> None:
    jid = forge_huge(store)
    for path in ("/dead", f"/jobs/{jid}", "/dead?q=tests"):
        answer = web.get(path)
        assert answer.status_code == 200, path
        assert len(answer.content) < 1024 * 1024, (path, len(answer.content))
    assert "bytes" in web.get("/dead").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', web.get("/dead").text)
    assert token
    form = {"op": "delete", "jid": jid, "csrf_token": token[1]}
    web.post("/sets/dead/action", data=form)
    assert store.zcard(K.dead) == 1


def test_a_huge_job_at_a_queue_tail_is_not_fetched_for_pages(
    web: TestClient, redis_url: str, store: redis.Redis
) -> None:
    payload = wire.build("tests.record", ["x" * HUGE], {}, queue="default")
    store.rpush(K.queue("default"), wire.encode(payload))  # the tail: the oldest
    store.lpush(
        K.queue("default"), wire.encode(wire.build("tests.record", [1], {}, queue="default"))
    )
    store.sadd(K.queues, "default")
    for path in ("/", "/stats.json", "/queues", "/queues/default"):
        tracemalloc.start()
        try:
            answer = web.get(path)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert answer.status_code == 200 and len(answer.content) < 1024 * 1024, path
        assert peak < HUGE // 4, f"{path} took {peak:,} bytes"
    assert run(redis_url, "stats").exit_code == 0
    token = re.search(r'name="csrf_token" value="([^"]+)"', web.get("/queues/default").text)
    assert token
    form = {"op": "delete", "jid": str(payload["jid"]), "csrf_token": token[1]}
    web.post("/queues/default/action", data=form)
    assert store.llen(K.queue("default")) == 1


def test_an_entry_longer_than_a_peek_keeps_its_jid_and_can_be_deleted(
    redis_url: str, store: redis.Redis
) -> None:
    payload = wire.build("tests.record", ["y" * 200_000], {}, queue="default")
    store.zadd(K.dead, {wire.encode(payload): time.time()})
    [listed] = json.loads(run(redis_url, "dead", "list", "--json").output)
    assert listed["jid"] == payload["jid"] and listed["job"] == "tests.record"
    assert "too long to read" in run(redis_url, "dead", "list").output
    assert run(redis_url, "dead", "delete", "--all").exit_code == 0
    assert store.zcard(K.dead) == 0
