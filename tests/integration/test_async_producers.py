"""The asyncio producer calls (SPEC §12) against a real Redis: ``aenqueue``,
``aenqueue_in``, ``aenqueue_at``, ``aresult``, ``acancel``, ``achain`` and a
batch's ``ajobs``/``aadd`` land what their sync twins land, and never block
the event loop.

pytest-asyncio is not a dependency: each test runs its coroutine with
``asyncio.run``, as a user's program does (one loop per run, a new one the
next time: the clients are per loop).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis

import jobmaster
from jobmaster import crypto, testing
from jobmaster.aio import client as aio_client
from jobmaster.client import Client
from jobmaster.connection import aconnect
from jobmaster.embedded import RedisServerProcess
from jobmaster.errors import JobFailed, JobmasterError, ResultPending, UnknownJob
from jobmaster.keys import Keys
from jobmaster.middleware import base as middleware
from jobmaster.redis_target import RedisTarget
from tests import acl
from tests.tls import make_certificates, serving

K = Keys()
T = TypeVar("T")
SECRET = "async-producers-key-0123456789abcdef"  # noqa: S105 - a test's

PW = "not-a-secret"
pytestmark = pytest.mark.timeout(60)

ran: list[tuple[str, Any, int]] = []  # (job, marker, thread id) of the jobs run inline


@jobmaster.job(
    name="tests.aio.add", queue="aio", retry=3, timeout=5, expires_in=600, result_ttl=120
)
def add(a: int, b: int) -> int:
    ran.append(("add", (a, b), threading.get_ident()))
    return a + b


@jobmaster.job(name="tests.aio.fetch")
async def fetch(marker: str) -> str:
    await asyncio.sleep(0)  # a real await: it runs on a loop
    ran.append(("fetch", marker, threading.get_ident()))
    return marker


@jobmaster.job(name="tests.aio.unique", unique="until_executed")
def unique_job(marker: str) -> None:
    pass


@jobmaster.job(name="tests.aio.sealed", encrypt=True)
def sealed(card: str) -> None:
    pass


@jobmaster.job(name="tests.aio.batch_done")
def batch_done(batch_id: str) -> None:
    ran.append(("batch_done", batch_id, threading.get_ident()))


@jobmaster.job(name="tests.aio.boom", retry=False)
def boom(marker: str) -> None:
    raise ValueError(f"boom {marker}")


@pytest.fixture(autouse=True)
def _producer(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("JOBMASTER_REDIS_URL", redis_url)
    monkeypatch.setattr(jobmaster.client, "_default", None)  # restored after the test
    jobmaster.configure(redis_url)
    ran.clear()
    yield
    crypto.set_keys(None)


@pytest.fixture
def store(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url) as connection:
        yield connection


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await make()

    return asyncio.run(main())


def same_fields(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload without what differs from one push to the next."""
    assert payload["created_at"] <= payload.get("enqueued_at", time.time()) <= time.time()
    return {k: v for k, v in payload.items() if k not in ("jid", "created_at", "enqueued_at")}


def queued(store: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(store.lrange(K.queue(queue), 0, -1))]


def scheduled(store: redis.Redis) -> list[tuple[dict[str, Any], float]]:
    entries = store.zrange(K.scheduled, 0, -1, withscores=True)
    return [(json.loads(raw), score) for raw, score in entries]


# -- aenqueue lands what enqueue lands ----------------------------------------
def test_aenqueue_lands_the_payload_enqueue_lands(store: redis.Redis) -> None:
    sync_jid = add.enqueue(1, b=2)
    async_jid = run(lambda: add.aenqueue(1, b=2))
    assert sync_jid and async_jid and sync_jid != async_jid
    first, second = queued(store, "aio")
    assert (first["jid"], second["jid"]) == (sync_jid, async_jid)
    assert same_fields(second) == same_fields(first)
    assert store.get(K.status(async_jid)) == store.get(K.status(sync_jid)) == b"queued"
    assert store.smembers(K.queues) == {b"aio"}


def test_options_aenqueue_lands_what_options_enqueue_lands(store: redis.Redis) -> None:
    bound = add.options(queue="other", retry=0, timeout=9)
    sync_jid = bound.enqueue(3, 4)
    async_jid = run(lambda: bound.aenqueue(3, 4))
    first, second = queued(store, "other")
    assert (first["jid"], second["jid"]) == (sync_jid, async_jid)
    assert same_fields(second) == same_fields(first)
    assert first["retry"] == 0 and first["queue"] == "other"


def test_aenqueue_in_and_at_land_what_enqueue_in_and_at_land(store: redis.Redis) -> None:
    when = time.time() + 3600
    jids = [
        add.enqueue_at(when, 5, 6),
        run(lambda: add.aenqueue_at(when, 5, 6)),
        add.options(queue="later").enqueue_in(600, 7, 8),
        run(lambda: add.options(queue="later").aenqueue_in(600, 7, 8)),
    ]
    found = {payload["jid"]: (payload, score) for payload, score in scheduled(store)}
    assert set(found) == set(jids)
    (at_sync, at_score), (at_async, at_async_score) = found[jids[0]], found[jids[1]]
    assert same_fields(at_async) == same_fields(at_sync) and at_score == at_async_score == when
    (in_sync, in_score), (in_async, in_async_score) = found[jids[2]], found[jids[3]]
    assert same_fields(in_async) == same_fields(in_sync)
    assert abs(in_async_score - in_score) < 5
    for jid in jids:
        assert store.get(K.status(jid)) == b"scheduled"
        assert store.ttl(K.status(jid)) > 600  # its wait plus status_ttl, as the sync one
    # A time in the past is now, as for enqueue_at.
    now_jid = run(lambda: add.aenqueue_at(time.time() - 10, 1, 1))
    assert [p["jid"] for p in queued(store, "aio")] == [now_jid]


def test_a_unique_duplicate_is_refused_by_either_call(store: redis.Redis) -> None:
    first = run(lambda: unique_job.aenqueue("u"))
    assert first is not None
    assert run(lambda: unique_job.aenqueue("u")) is None
    assert unique_job.enqueue("u") is None  # the same lock, the same digest
    assert run(lambda: unique_job.aenqueue("other")) is not None
    [payload, _] = queued(store, "default")
    assert payload["jid"] == first and payload["unique"] == "until_executed"
    assert store.exists(K.unique(payload["unique_digest"]))


def test_an_encrypted_job_is_sealed_by_aenqueue(store: redis.Redis, redis_url: str) -> None:
    jobmaster.configure(redis_url, secret_key=SECRET)
    jid = run(lambda: sealed.aenqueue("4242-4242"))
    [raw] = store.lrange(K.queue("default"), 0, -1)
    assert b"4242-4242" not in raw
    payload = json.loads(raw)
    assert payload["jid"] == jid
    assert crypto.arguments(payload, sealed=True) == (["4242-4242"], {})


class Stamp(middleware.Middleware):
    """Stamps every payload; drops the ones whose first argument is 'drop'."""

    def before_enqueue(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        if payload["args"] and payload["args"][0] == "drop":
            return None
        return {**payload, "stamped": True}


def test_client_middleware_runs_for_aenqueue(store: redis.Redis) -> None:
    middleware.add(Stamp())
    try:
        jid = run(lambda: unique_job.aenqueue("kept"))
        assert run(lambda: fetch.aenqueue("drop")) is None
        assert run(lambda: unique_job.aenqueue("drop")) is None
    finally:
        middleware.clear()
    [payload] = queued(store, "default")
    assert payload["jid"] == jid and payload["stamped"] is True


# -- aresult -------------------------------------------------------------------
def test_aresult_waits_for_a_result_recorded_by_the_worker_code(store: redis.Redis) -> None:
    async def main() -> int:
        jid = await add.aenqueue(20, 22)
        assert jid is not None
        waiting = asyncio.ensure_future(jobmaster.aresult(jid, wait=20))
        deadline = time.monotonic() + 10  # the waiter registers itself first
        while not store.exists(K.result_waiter(jid)) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not waiting.done()
        # The job runs as a worker runs it (FINISH, then the ended channel).
        assert await asyncio.to_thread(testing.work) == {"done": 1}
        return await waiting

    assert run(main) == 42


def test_aresult_raises_as_result_does(store: redis.Redis) -> None:
    async def main() -> None:
        with pytest.raises(UnknownJob):
            await jobmaster.aresult("0" * 24)
        jid = await boom.aenqueue("x")
        assert jid is not None
        with pytest.raises(ResultPending):
            await jobmaster.aresult(jid)
        with pytest.raises(ResultPending):
            await jobmaster.aresult(jid, wait=0.2)
        await asyncio.to_thread(testing.work)
        with pytest.raises(JobFailed) as failed:
            await jobmaster.aresult(jid, wait=1)
        assert failed.value.error_class == "ValueError"
        assert "boom x" in str(failed.value.error_message)
        with pytest.raises(JobFailed) as sync_failed:
            jobmaster.result(jid)
        assert str(sync_failed.value) == str(failed.value)

    run(main)


# -- acancel -------------------------------------------------------------------
def test_acancel_removes_a_waiting_job(store: redis.Redis) -> None:
    async def main() -> list[str]:
        now = await add.aenqueue(1, 1)
        later = await add.aenqueue_in(600, 2, 2)
        assert now and later
        assert await jobmaster.acancel(now) is True
        assert await jobmaster.acancel(later) is True
        assert await jobmaster.acancel(now) is False  # it has ended
        assert await jobmaster.acancel("f" * 24) is False  # unknown
        with pytest.raises(JobFailed) as cancelled:
            await jobmaster.aresult(now)
        assert cancelled.value.status == "cancelled"
        return [now, later]

    jids = run(main)
    assert store.llen(K.queue("aio")) == 0 and store.zcard(K.scheduled) == 0
    assert [store.get(K.status(jid)) for jid in jids] == [b"cancelled"] * 2
    assert all(store.zscore(K.cancels, jid) is not None for jid in jids)  # requests made first


def test_acancel_of_a_running_job_waits_for_its_end(store: redis.Redis) -> None:
    jid = "abcdefabcdefabcdefabcdef"
    store.set(K.status(jid), "working", ex=60)  # fetched by a worker elsewhere

    async def main() -> None:
        started = time.monotonic()
        assert await jobmaster.acancel(jid, wait=0.3) is False  # not confirmed in time
        assert time.monotonic() - started >= 0.3
        assert await jobmaster.acancel(jid) is True  # the request is made

    run(main)
    assert store.zscore(K.cancels, jid) is not None


# -- never blocking the loop -----------------------------------------------------
def test_the_loop_keeps_running_while_aresult_waits_and_aenqueue_pushes() -> None:
    async def main() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        try:
            jid = await add.aenqueue(1, 2)
            assert jid is not None
            await asyncio.gather(*(add.aenqueue(n, n) for n in range(200)))
            started = time.monotonic()
            with pytest.raises(ResultPending):
                await jobmaster.aresult(jid, wait=2)
            assert time.monotonic() - started >= 2
        finally:
            task.cancel()
        return ticks

    # A blocking wait would leave the ticker at a handful of ticks; 2 s of
    # 10 ms sleeps is ~200 on an idle machine, far more than 50 on a busy one.
    assert run(main) > 50


# -- one client per loop, and after a fork ----------------------------------------
def test_each_asyncio_run_gets_its_own_client_and_closes_it(store: redis.Redis) -> None:
    made: list[aio_client.AsyncClient] = []

    async def once(n: int) -> int:
        made.append(await aio_client.async_client())
        assert await aio_client.async_client() is made[-1]  # one per loop
        jid = await add.aenqueue(n, n)
        assert jid is not None
        await asyncio.to_thread(testing.work)
        return int(await jobmaster.aresult(jid, wait=5))

    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        assert asyncio.run(once(1)) == 2
        assert asyncio.run(once(2)) == 4  # a new loop: the first client's pool was its own
        gc.collect()
    assert made[0] is not made[1]
    for client in made:  # closed with its loop (asyncio.run's shutdown_asyncgens)
        pool = client.redis.connection_pool
        assert all(not c.is_connected for c in pool._available_connections)
        assert not pool._in_use_connections


def test_a_forked_child_makes_its_own_client(store: redis.Redis) -> None:
    loop = asyncio.new_event_loop()
    try:
        parent_client = loop.run_until_complete(aio_client.async_client())
        loop.run_until_complete(add.aenqueue(1, 0))
        pid = os.fork()
        if pid == 0:  # the child: same loop object, its own client
            code = 1
            try:
                child_client = loop.run_until_complete(aio_client.async_client())
                jid = loop.run_until_complete(add.aenqueue(2, 0))
                code = 0 if child_client is not parent_client and jid else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # The parent's client was neither used nor closed by the child.
        assert loop.run_until_complete(aio_client.async_client()) is parent_client
        loop.run_until_complete(add.aenqueue(3, 0))
        assert [p["args"] for p in queued(store, "aio")] == [[1, 0], [2, 0], [3, 0]]
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def test_a_client_around_a_connection_of_ones_own_is_refused(redis_url: str) -> None:
    jobmaster.client._default = Client(connection=redis.Redis.from_url(redis_url))
    with pytest.raises(JobmasterError, match="made from a URL or a config"):
        run(lambda: add.aenqueue(1, 1))


# -- workflows --------------------------------------------------------------------
def test_achain_starts_a_chain_that_the_worker_code_runs_on(store: redis.Redis) -> None:
    cid = run(lambda: jobmaster.achain(add.s(1, 2), add.s(3, 4)))
    status = jobmaster.chain_status(cid)
    assert status is not None and status["steps"] == 2 and status["state"] == "running"
    [first] = queued(store, "aio")
    assert first["chain"]["id"] == cid and first["args"] == [1, 2]
    assert testing.work() == {"done": 2}
    status = jobmaster.chain_status(cid)
    assert status is not None and status["state"] == "succeeded"


def test_a_batch_block_collects_aenqueue_and_pushes_on_the_asyncio_client(
    store: redis.Redis,
) -> None:
    b = jobmaster.batch(description="async", on_success=batch_done.s())

    async def main() -> list[str | None]:
        async with b.ajobs():
            jids = list(await asyncio.gather(*(add.aenqueue(n, 1) for n in range(3))))
            assert store.llen(K.queue("aio")) == 0  # nothing pushed before the block ends
        jids += await b.aadd(add.s(9, 9))
        return jids

    jids = run(main)
    in_queue = queued(store, "aio")
    assert {p["jid"] for p in in_queue} == set(jids)
    assert all(p["batch"] == b.bid for p in in_queue)
    status = jobmaster.batch_status(b.bid)
    assert status is not None and status["total"] == 4
    assert testing.work() == {"done": 5}  # the four, then the success callback
    status = jobmaster.batch_status(b.bid)
    assert status is not None and status["succeeded"] == 4
    assert [r[:2] for r in ran if r[0] == "batch_done"] == [("batch_done", b.bid)]


# -- inline -------------------------------------------------------------------------
def test_inline_aenqueue_awaits_an_async_job_and_threads_a_sync_one() -> None:
    loop_thread = 0

    async def main() -> None:
        nonlocal loop_thread
        loop_thread = threading.get_ident()
        with testing.inline():
            assert await fetch.aenqueue("here")
            assert await add.aenqueue(2, 3)

    run(main)
    assert ran[0] == ("fetch", "here", loop_thread)  # awaited in place
    assert ran[1][:2] == ("add", (2, 3)) and ran[1][2] != loop_thread  # in a thread


def test_inline_enqueue_of_an_async_job_runs_it_to_its_end() -> None:
    with testing.inline():
        assert fetch.enqueue("sync") is not None
    assert [r[:2] for r in ran] == [("fetch", "sync")]

    async def inside_a_loop() -> None:
        with testing.inline(), pytest.raises(RuntimeError, match="aenqueue"):
            fetch.enqueue("in a loop")

    run(inside_a_loop)


# -- the connection -------------------------------------------------------------------
def test_aconnect_opens_what_connect_opens(tmp_path: Any) -> None:
    ca = str(tmp_path / "ca")
    client = aconnect(RedisTarget(url="rediss://h:6380/2", password=PW, ssl_ca_certs=ca))
    kwargs = client.connection_pool.connection_kwargs
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("h", 6380, 2)
    assert kwargs["password"] == PW and kwargs["ssl_ca_certs"] == ca
    assert kwargs["socket_timeout"] == 10.0 and kwargs["retry"].get_retries() == 0
    embedded = aconnect(RedisTarget(url="embedded", data_dir=str(tmp_path)))
    assert embedded.connection_pool.connection_class.__name__ == "UnixDomainSocketConnection"
    sentinel = aconnect(RedisTarget(url=f"redis://:{PW}@x/1", sentinels=("s1:26379",)))
    assert type(sentinel.connection_pool).__name__ == "SentinelConnectionPool"
    assert sentinel.connection_pool.connection_kwargs["password"] == PW


# -- the same configuration: ACL user, TLS ----------------------------------------------
ACL_PASSWORD = "aio-acl-password-5c1e"  # noqa: S105 - a throwaway test server's


def test_the_documented_producer_user_may_make_every_async_call(
    private_redis: RedisServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The producer recipe of docs/redis-deployment.md grants what the asyncio
    client sends (its scripts, its pipelines, the waiter key and SUBSCRIBE)."""
    with private_redis.client() as admin:
        admin.acl_log_reset()
        acl.create_user(admin, acl.PRODUCER, ACL_PASSWORD, rule=acl.PRODUCER)
        url = f"redis://{acl.PRODUCER}:{ACL_PASSWORD}@127.0.0.1:{private_redis.port}/0"
        monkeypatch.setattr(jobmaster.client, "_default", None)
        jobmaster.configure(url)

        async def main() -> None:
            queued_jid = await add.aenqueue(1, 2)
            later_jid = await add.aenqueue_in(600, 3, 4)
            assert queued_jid and later_jid
            assert await unique_job.aenqueue("acl") is not None
            b = jobmaster.batch(on_complete=batch_done.s())
            async with b.ajobs():
                await add.aenqueue(5, 6)
            await jobmaster.achain(add.s(7, 8), add.s(9, 10))
            with pytest.raises(ResultPending):
                await jobmaster.aresult(queued_jid, wait=0.3)
            assert await jobmaster.acancel(later_jid) is True
            assert await jobmaster.acancel(queued_jid) is True

        run(main)
        assert acl.acl_log(admin) == []  # not one command was refused
        assert admin.llen(K.queue("aio")) == 2  # the batch's job and the chain's first step


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    certs = make_certificates(tmp_path_factory.mktemp("certs"))
    with serving(tmp_path_factory.mktemp("redis-tls"), certs) as server:
        yield server, certs


def test_a_producer_configured_for_mutual_tls_makes_its_async_calls_over_it(
    tls_server: tuple[Any, Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, certs = tls_server
    path = tmp_path / "jobmaster.toml"
    path.write_text(
        f'redis_url = "{server.url}"\n'
        f'redis_ssl_ca_certs = "{certs.ca}"\n'
        f'redis_ssl_certfile = "{certs.client_cert}"\n'
        f'redis_ssl_keyfile = "{certs.client_key}"\n'
    )
    for name in ("JOBMASTER_REDIS_URL", "REDIS_URL"):  # the file's rediss:// URL must win
        monkeypatch.delenv(name)
    monkeypatch.setattr(jobmaster.client, "_default", None)
    jobmaster.configure(config=path)
    with server.client() as tls_store:
        tls_store.flushall()
        jid = run(lambda: add.aenqueue(1, 2))
        assert [p["jid"] for p in queued(tls_store, "aio")] == [jid]
        with pytest.raises(ResultPending):
            run(lambda: jobmaster.aresult(str(jid), wait=0.2))
