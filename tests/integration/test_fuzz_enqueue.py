"""Fuzzing ``enqueue``: any arguments give a jid or a TypeError naming the bad one.

SPEC section 3: arguments must be JSON-serialisable and ``enqueue`` raises
``TypeError`` naming the bad argument otherwise. The oracle here is JSON
itself: an argument is good if ``json.dumps`` writes it and ``json.loads``
gives back an equal value (tuples read back as lists). Anything else (sets,
bytes, objects, nan, non-string dict keys JSON would quietly turn into
strings, integers past Python's 4300-digit limit, nesting past the recursion
limit, a list that contains itself) must be refused up front, by name,
because a producer that gets a traceback from deep inside json, or a job run
with other arguments than it was given, has no way to know which argument
to fix.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobmaster import payload as wire
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests import fuzzing
from tests.fuzzing import canonical, deeply_nested, python_values, self_containing

K = Keys()
JID = re.compile(r"[0-9a-f]{24}")

# Keyword names that collide with the enqueue methods' own parameters.
kwarg_names = st.text(fuzzing.any_char, max_size=8) | st.sampled_from(
    ["self", "seconds", "when", "args", "kwargs"]
)


def as_json(value: Any) -> Any:
    """What JSON makes of ``value``: tuples become lists, everything else must stay equal."""
    if isinstance(value, tuple | list):
        return [as_json(item) for item in value]
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    return value


def survives_json(value: Any) -> bool:
    """The oracle: JSON writes ``value`` and reads back an equal value."""
    try:
        text = json.dumps(value, allow_nan=False)
        return bool(json.loads(text) == as_json(value))
    except (TypeError, ValueError, RecursionError):
        return False


def first_bad(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """How enqueue's error must name the first argument JSON cannot carry."""
    for index, arg in enumerate(args):
        if not survives_json(arg):
            return f"argument {index}"
    for key, arg in kwargs.items():
        if not survives_json(arg):
            return f"keyword argument {key!r}"
    return None


@pytest.fixture
def producer(redis_url: str) -> Iterator[Client]:
    """The fuzz job pushes to the test's private Redis, through its own client only."""
    client = Client(redis_url)
    fuzzing.accept.client = client
    try:
        yield client
    finally:
        fuzzing.accept.client = None


def stored_payload(store: redis.Redis, method: str, jid: str) -> dict[str, Any]:
    """The payload of ``jid`` as it is in Redis (the queue, or the scheduled set)."""
    if method == "enqueue":
        raws = store.lrange(K.queue("default"), 0, -1)
    else:
        raws = store.zrange(K.scheduled, 0, -1)
    found = [wire.decode(raw) for raw in raws if json.loads(raw).get("jid") == jid]
    assert len(found) == 1, f"jid {jid} is stored {len(found)} times"
    return found[0]


def call(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    job = fuzzing.accept
    if method == "enqueue":
        return job.enqueue(*args, **kwargs)
    if method == "enqueue_in":
        return job.enqueue_in(3600, *args, **kwargs)
    return job.enqueue_at(time.time() + 3600, *args, **kwargs)


@pytest.mark.timeout(60)
@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(["enqueue", "enqueue_in", "enqueue_at"]),
    args=st.lists(python_values, max_size=3).map(tuple),
    kwargs=st.dictionaries(kwarg_names, python_values, max_size=3),
)
@example(method="enqueue", args=(10**4300,), kwargs={})  # json.dumps: ValueError, not TypeError
@example(method="enqueue", args=(deeply_nested(3000),), kwargs={})  # RecursionError
@example(method="enqueue", args=(self_containing(),), kwargs={})
@example(method="enqueue", args=(), kwargs={"x": {1: "one"}})  # would arrive as {"1": ...}
@example(method="enqueue", args=(), kwargs={"self": 1})  # enqueue's own parameter name
@example(method="enqueue_in", args=("m",), kwargs={"seconds": 2})  # as tests.record takes
@example(method="enqueue_at", args=(), kwargs={"when": "now"})
@example(method="enqueue", args=((1, (2, "\ud800")),), kwargs={"": -0.0})
def test_enqueue_returns_a_jid_or_a_type_error_naming_the_bad_argument(
    producer: Client,
    store: redis.Redis,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    store.delete(K.queue("default"), K.scheduled)
    bad = first_bad(args, kwargs)
    try:
        jid = call(method, args, kwargs)
    except TypeError as error:
        assert bad is not None, f"refused good arguments: {error}"
        assert fuzzing.ACCEPT in str(error) and bad in str(error), (
            f"the error does not name {bad}: {error}"
        )
        assert store.llen(K.queue("default")) == store.zcard(K.scheduled) == 0, "pushed anyway"
        return
    assert bad is None, f"{bad} cannot survive JSON, yet {method} returned {jid!r}"
    assert isinstance(jid, str) and JID.fullmatch(jid), jid
    payload = stored_payload(store, method, jid)
    assert payload["job"] == fuzzing.ACCEPT
    # Exactly what a JSON round trip gives: bool stays bool, tuples are lists.
    assert canonical(payload["args"]) == canonical(as_json(list(args)))
    assert canonical(payload["kwargs"]) == canonical(as_json(kwargs))
