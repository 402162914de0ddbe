"""The I/O core: calls of threads ending jobs together share a round trip, each
thread still gets its own reply or error, and the fetch rides with the
acknowledgements of the runners it feeds."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from jobmaster.recovery import RecoveryReport
from jobmaster.worker.core import IOCore
from jobmaster.worker.fetch import Feed, Fetcher, Pool
from jobmaster.worker.running import RunningTable
from jobmaster.worker.unit import Unit
from tests.helpers import wait_until

STARTED: list[IOCore] = []


@pytest.fixture(autouse=True)
def _close_cores() -> Iterator[None]:
    """Each core's thread ends with its test (the suite fails on a leak)."""
    yield
    while STARTED:
        STARTED.pop().close()


def started(client: Any) -> IOCore:
    core = IOCore(client)
    STARTED.append(core)
    core.start()
    return core


class FakeScript:
    """A Script's stand-in: its reply is its first argument; the first call blocks."""

    sha = "f" * 40

    def __init__(self) -> None:
        self.release = threading.Event()
        self.single_calls: list[Any] = []

    def __call__(self, keys: list[Any], args: list[Any], client: Any = None) -> Any:
        self.single_calls.append(args[0])
        if len(self.single_calls) == 1:
            self.release.wait(10)
        return args[0]


class FakePipeline:
    def __init__(self, owner: FakeClient) -> None:
        self.owner = owner
        self.sent: list[tuple[Any, ...]] = []

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> None:
        self.sent.append(keys_and_args[numkeys:])

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        self.owner.round_trips.append(len(self.sent))
        if self.owner.fail_with is not None:
            raise self.owner.fail_with
        return [self.owner.replies.get(args[0], args[0]) for args in self.sent]


class FakeClient:
    def __init__(self) -> None:
        self.round_trips: list[int] = []
        self.fail_with: Exception | None = None
        self.replies: dict[Any, Any] = {}

    def pipeline(self, transaction: bool = True) -> FakePipeline:
        return FakePipeline(self)


def run_together(acks: IOCore, script: FakeScript, values: list[str]) -> dict[str, Any]:
    """The first value's call is in flight while the others queue behind it."""
    results: dict[str, Any] = {}

    def call(value: str) -> None:
        try:
            results[value] = acks.call(script, ["k"], [value])  # type: ignore[arg-type]
        except Exception as error:  # the test looks at what each thread got
            results[value] = error

    first = threading.Thread(target=call, args=(values[0],))
    first.start()
    wait_until(lambda: script.single_calls == [values[0]], timeout=5)
    others = [threading.Thread(target=call, args=(value,)) for value in values[1:]]
    for thread in others:
        thread.start()
    wait_until(lambda: acks._inbox.qsize() == len(others), timeout=5, message="calls queued")
    script.release.set()
    for thread in [first, *others]:
        thread.join(5)
    return results


def test_calls_queued_during_a_round_trip_share_the_next_one() -> None:
    client, script = FakeClient(), FakeScript()
    results = run_together(started(client), script, ["a", "b", "c", "d"])
    assert results == {"a": "a", "b": "b", "c": "c", "d": "d"}  # each its own reply
    assert client.round_trips == [3]  # b, c and d in one pipeline


def test_a_lost_round_trip_fails_every_call_in_it() -> None:
    client, script = FakeClient(), FakeScript()
    client.fail_with = redis.ConnectionError("gone")
    results = run_together(started(client), script, ["a", "b", "c"])
    assert results["a"] == "a"
    assert all(isinstance(results[v], redis.ConnectionError) for v in ("b", "c"))


def test_a_script_unknown_to_redis_is_sent_again_on_its_own() -> None:
    client, script = FakeClient(), FakeScript()
    client.replies["c"] = redis.exceptions.NoScriptError("NOSCRIPT")
    results = run_together(started(client), script, ["a", "b", "c"])
    assert results == {"a": "a", "b": "b", "c": "c"}
    assert script.single_calls == ["a", "c"]  # c again, through Script (which loads it)


def test_an_error_reply_goes_to_its_caller_only() -> None:
    client, script = FakeClient(), FakeScript()
    client.replies["b"] = redis.ResponseError("ERR in the script")
    results = run_together(started(client), script, ["a", "b", "c"])
    assert isinstance(results["b"], redis.ResponseError) and results["c"] == "c"


def test_a_call_alone_is_a_plain_script_call() -> None:
    client, script = FakeClient(), FakeScript()
    script.release.set()
    assert started(client).call(script, ["k"], ["solo"]) == "solo"  # type: ignore[arg-type]
    assert client.round_trips == [] and script.single_calls == ["solo"]


def test_without_a_core_running_the_caller_sends_its_own_call() -> None:
    """A context used outside a worker process (tests, tools, ``testing.work``)
    starts no thread; after ``close`` a late call is sent by its caller too."""
    client, script = FakeClient(), FakeScript()
    script.release.set()
    core = IOCore(client)  # type: ignore[arg-type]
    assert core.call(script, ["k"], ["before"]) == "before"  # type: ignore[arg-type]
    assert core._thread is None
    core.start()
    core.close()
    assert core.call(script, ["k"], ["after"]) == "after"  # type: ignore[arg-type]
    assert script.single_calls == ["before", "after"]


# -- the fetch, fed by the core -------------------------------------------------


class FetchScript:
    """FETCH's stand-in: hands out ``stock`` jobs, as many as asked at most."""

    sha = "e" * 40

    def __init__(self, stock: int) -> None:
        self.stock = stock
        self.asked: list[int] = []
        self.made = 0

    def reply(self, wanted: int) -> list[Any] | None:
        self.asked.append(wanted)
        taken = min(wanted, self.stock)
        self.stock -= taken
        if not taken:
            return None
        pairs: list[Any] = []
        for _ in range(taken):
            self.made += 1
            pairs += [f"job-{self.made}".encode(), b"default"]
        return pairs

    def __call__(self, keys: list[Any], args: list[Any], client: Any = None) -> Any:
        return self.reply(int(args[0]))


class FetchingPipe:
    def __init__(self, owner: FetchingClient) -> None:
        self.owner = owner
        self.sent: list[tuple[str, tuple[Any, ...]]] = []

    def evalsha(self, sha: str, numkeys: int, *rest: Any) -> None:
        self.sent.append((sha, rest[numkeys:]))

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        fetch = self.owner.fetch
        self.owner.batches.append(["FETCH" if sha == fetch.sha else a[0] for sha, a in self.sent])
        return [fetch.reply(int(a[0])) if sha == fetch.sha else a[0] for sha, a in self.sent]


class FetchingClient(FakeClient):
    """Pipelines whose FETCH (by its sha) is answered by a FetchScript; each
    round trip's calls are kept in ``batches``."""

    def __init__(self, fetch: FetchScript) -> None:
        super().__init__()
        self.fetch = fetch
        self.batches: list[list[str]] = []

    def pipeline(self, transaction: bool = True) -> FetchingPipe:  # type: ignore[override]
        return FetchingPipe(self)


def fed_core(stock: int, runners: int) -> tuple[IOCore, Feed, FetchingClient]:
    fetch = FetchScript(stock)
    client = FetchingClient(fetch)
    swept: list[list[bytes]] = []  # what each quiet's sweep gave back
    ctx = SimpleNamespace(
        config=SimpleNamespace(queue_weights=[("default", 1)], strict=True),
        keys=SimpleNamespace(queue=lambda name: f"q:{name}", paused="paused"),
        inprogress_key="inprogress",
        scripts=SimpleNamespace(fetch=fetch),
        redis=SimpleNamespace(lrange=lambda key, start, end: [b"left-behind"]),
        recovery=SimpleNamespace(
            requeue=lambda key, entries: swept.append(list(entries)) or RecoveryReport()
        ),
        swept=swept,
    )
    fetching, stopping = threading.Event(), threading.Event()
    fetching.set()
    table = RunningTable(fetching, stopping)
    ready: queue.SimpleQueue[Unit | None] = queue.SimpleQueue()
    pool = Pool(runners, lambda units: [ready.put(unit) for unit in units] and None)
    feed = Feed(Fetcher(ctx), table, [pool])  # type: ignore[arg-type]
    feed.swept = swept  # type: ignore[attr-defined]
    feed.ready = ready  # type: ignore[attr-defined]
    core = IOCore(client)  # type: ignore[arg-type]
    core.attach(feed)
    STARTED.append(core)
    return core, feed, client


def taken(feed: Feed, count: int) -> list[Unit]:
    units = []
    for _ in range(count):
        unit = feed.ready.get(timeout=5)
        assert unit is not None
        units.append(unit)
    return units


def test_the_core_fetches_for_every_free_runner_and_no_more() -> None:
    core, feed, client = fed_core(stock=10, runners=3)
    core.start()
    units = taken(feed, 3)
    assert [u.raw for u in units] == [b"job-1", b"job-2", b"job-3"]
    assert core.barrier(5)
    assert client.fetch.asked == [3]  # three runners free: one FETCH of three
    assert feed.ready.empty() and feed.held == 3


def test_a_runners_finish_carries_the_fetch_of_its_next_job() -> None:
    core, feed, client = fed_core(stock=10, runners=2)
    core.start()
    first, _second = taken(feed, 2)
    reply = core.call(FakeScript(), ["k"], ["finish-1"], frees=first)  # type: ignore[arg-type]
    assert reply == "finish-1"
    [third] = taken(feed, 1)
    assert third.raw == b"job-3"
    # The FINISH and the FETCH of the job that replaces it: one round trip.
    assert client.batches == [["finish-1", "FETCH"]]
    assert client.fetch.asked == [2, 1]


def test_an_empty_look_is_not_repeated_until_a_push_is_heard() -> None:
    core, feed, client = fed_core(stock=0, runners=2)
    core.start()
    wait_until(lambda: client.fetch.asked == [2], timeout=5, message="the first look")
    assert feed.hungry  # the safety tick wakes the core only while runners wait
    client.fetch.stock = 1
    assert core.barrier(5)  # a round (nothing to send) after the empty look
    assert client.fetch.asked == [2]  # not looked again: nothing was heard
    core.wake()  # a push heard
    [unit] = taken(feed, 1)
    assert unit.raw == b"job-1" and client.fetch.asked == [2, 2]


def test_quiet_fetches_nothing_and_once_idle_gives_back_what_no_runner_holds() -> None:
    core, feed, client = fed_core(stock=10, runners=2)
    core.start()
    first, second = taken(feed, 2)
    assert core.barrier(5)
    assert client.fetch.asked == [2]
    feed.table.fetching.clear()  # quiet
    core.free(first)
    core.wake()
    assert core.barrier(5)
    assert feed.swept == []  # type: ignore[attr-defined]  # a runner still holds a job
    core.free(second)
    core.wake()
    assert core.barrier(5)
    core.wake()
    assert core.barrier(5)
    assert client.fetch.asked == [2] and feed.held == 0
    # Idle: a FETCH whose reply was lost left an entry no runner holds; given back once.
    assert feed.swept == [[b"left-behind"]]  # type: ignore[attr-defined]


def test_a_barrier_waits_for_the_round_trip_in_flight() -> None:
    client, script = FakeClient(), FakeScript()
    core = started(client)
    caller = threading.Thread(target=lambda: core.call(script, ["k"], ["slow"]))  # type: ignore[arg-type]
    caller.start()
    wait_until(lambda: script.single_calls == ["slow"], timeout=5)
    assert not core.barrier(0.2)  # the round trip is still in flight
    script.release.set()
    assert core.barrier(5)
    caller.join(5)


def test_a_bug_in_a_round_fails_its_calls_like_a_lost_round_trip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A caller never waits for nothing: the calls of a round that failed on
    our own bug get a RedisError (record sends its FINISH again), and the
    core carries on."""
    client, script = FakeClient(), FakeScript()
    script.release.set()
    core = started(client)
    broken = {"once": True}
    original = IOCore._due_marks

    def fails_once(self: IOCore, now: float) -> Any:
        if broken.pop("once", False):
            raise RuntimeError("a bug of ours")
        return original(self, now)

    monkeypatch.setattr(IOCore, "_due_marks", fails_once)
    with pytest.raises(redis.RedisError, match="a bug of ours"):
        core.call(script, ["k"], ["lost"])  # type: ignore[arg-type]
    assert core.call(script, ["k"], ["next"]) == "next"  # type: ignore[arg-type]


def test_a_loop_s_replies_settled_together_wake_it_once() -> None:
    """Mailbox: the FINISHes of one round trip reach their coroutines through
    one wakeup of the loop, not one each."""
    import asyncio

    from jobmaster.worker.core import mailbox_of

    async def main() -> int:
        loop = asyncio.get_running_loop()
        box = mailbox_of(loop)
        futures = [loop.create_future() for _ in range(50)]
        wakeups = 0
        real = loop.call_soon_threadsafe

        def counted(*args: Any) -> Any:
            nonlocal wakeups
            wakeups += 1
            return real(*args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        poster = threading.Thread(target=lambda: [box.post(future) for future in futures])
        poster.start()
        poster.join()
        await asyncio.gather(*futures)
        return wakeups

    assert asyncio.run(main()) == 1


def test_no_fetch_while_a_crash_suspect_waits_for_the_process_or_runs() -> None:
    """A job fetched then would only wait behind the suspect (up to the loop's
    100 with async jobs) while another process could run it."""
    fetching, stopping = threading.Event(), threading.Event()
    fetching.set()
    table = RunningTable(fetching, stopping)
    feed = Feed(None, table, [Pool(4, lambda units: None)])  # type: ignore[arg-type]
    assert feed.due(0.0)
    suspect = Unit(b'{"jid":"s","job":"x","crash_suspect":true}', "default")
    table.claim(suspect)
    assert table.start(suspect, 0)
    assert not feed.due(0.0)
    table.end(suspect, 0)
    assert feed.due(0.0)
