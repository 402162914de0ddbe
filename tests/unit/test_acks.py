"""Combined acknowledgements: FINISH calls of threads ending jobs together share
a round trip, and each thread still gets its own reply or error."""

from __future__ import annotations

import threading
from typing import Any

import redis

from jobmaster.worker.acks import Acks
from tests.helpers import wait_until


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


def run_together(acks: Acks, script: FakeScript, values: list[str]) -> dict[str, Any]:
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
    wait_until(lambda: len(acks._queued) == len(others), timeout=5, message="calls queued")
    script.release.set()
    for thread in [first, *others]:
        thread.join(5)
    return results


def test_calls_queued_during_a_round_trip_share_the_next_one() -> None:
    client, script = FakeClient(), FakeScript()
    acks = Acks(client)  # type: ignore[arg-type]
    results = run_together(acks, script, ["a", "b", "c", "d"])
    assert results == {"a": "a", "b": "b", "c": "c", "d": "d"}  # each its own reply
    assert client.round_trips == [3]  # b, c and d in one pipeline


def test_a_lost_round_trip_fails_every_call_in_it() -> None:
    client, script = FakeClient(), FakeScript()
    client.fail_with = redis.ConnectionError("gone")
    results = run_together(Acks(client), script, ["a", "b", "c"])  # type: ignore[arg-type]
    assert results["a"] == "a"
    assert all(isinstance(results[v], redis.ConnectionError) for v in ("b", "c"))


def test_a_script_unknown_to_redis_is_sent_again_on_its_own() -> None:
    client, script = FakeClient(), FakeScript()
    client.replies["c"] = redis.exceptions.NoScriptError("NOSCRIPT")
    results = run_together(Acks(client), script, ["a", "b", "c"])  # type: ignore[arg-type]
    assert results == {"a": "a", "b": "b", "c": "c"}
    assert script.single_calls == ["a", "c"]  # c again, through Script (which loads it)


def test_an_error_reply_goes_to_its_caller_only() -> None:
    client, script = FakeClient(), FakeScript()
    client.replies["b"] = redis.ResponseError("ERR in the script")
    results = run_together(Acks(client), script, ["a", "b", "c"])  # type: ignore[arg-type]
    assert isinstance(results["b"], redis.ResponseError) and results["c"] == "c"


def test_a_call_alone_is_a_plain_script_call() -> None:
    client, script = FakeClient(), FakeScript()
    script.release.set()
    assert Acks(client).call(script, ["k"], ["solo"]) == "solo"  # type: ignore[arg-type]
    assert client.round_trips == [] and script.single_calls == ["solo"]
