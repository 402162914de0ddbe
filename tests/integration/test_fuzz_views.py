"""Fuzzing what the operator's commands and the dashboard read from Redis.

SPEC §8: every value read from Redis may be corrupt or forged, and no page
or command fails with a traceback because of one. test_fuzz_redis_values.py
writes arbitrary counters, heartbeats (of any fields, or keys of the wrong
type), set members, sorted-set members and scores (non-finite included),
control lists and an oversized queue entry, for the master and children;
here the same worlds, plus forged batches, are read by every listing
command (text and ``--json``) and every page.

Each must answer: a command exits 0 or 1 with no traceback (a one-line error
is an answer), a page answers below 500.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from jobmaster import exitcodes
from jobmaster.cli import main
from jobmaster.config import load_config
from jobmaster.keys import Keys
from jobmaster.web import create_app
from tests.integration.test_fuzz_redis_values import (
    BIG,
    World,
    values,
    worlds,
    write,
    write_wrong_type,
)

pytestmark = pytest.mark.timeout(300)
K = Keys()
CHILD = "fuzzhost:9:0000child"
LOCAL = "http://localhost"  # a Host the dashboard answers for
PAGES = ["/", "/busy", "/queues", "/queues/default", "/stats.json", "/scheduled", "/retries"]
PAGES += ["/dead", "/batches", "/batches/b1", "/periodic"]
COMMANDS = [
    ["stats"],
    ["ps"],
    ["dead", "list"],
    ["retries", "list"],
    ["scheduled", "list"],
    ["queue", "list"],
    ["batches", "list"],
    ["batches", "show", "b1"],
    ["periodic", "list"],
]
BATCH_FIELDS = ["created_at", "total", "pending", "succeeded", "dead", "complete_at"]
FUZZ = settings(
    max_examples=int(os.environ.get("JOBMASTER_FUZZ_VIEWS", "20")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    # No "explain" phase: it traces every line, and each command makes new
    # connections whose setup reads package metadata: minutes per example.
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
)
batches = st.dictionaries(st.sampled_from([*BATCH_FIELDS, "description"]), values, max_size=6)


@pytest.fixture
def web(redis_url: str) -> Iterator[TestClient]:
    config = load_config(None, {"redis_url": redis_url})
    with TestClient(create_app(config), base_url=LOCAL, follow_redirects=False) as client:
        yield client


def test_any_value_read_by_the_commands_and_pages_gets_an_answer(
    redis_url: str, web: TestClient
) -> None:
    store = redis.Redis.from_url(redis_url)
    runner = CliRunner()

    @FUZZ
    @given(world=worlds, batch=batches)
    @example(
        world=World(
            counters={"processed": b"nan", "failed": b"inf"},
            other_heartbeat={"pid": b"nan", "busy": b"inf", "beat_at": b"-inf", "role": b"\xff"},
            control="string",
            child_control=[b"\x1b]52;c;x\x07"],
            members={K.queues: [b"\xff", b"\x1b[2J"], K.processes: [b"\xfe"]},
            zsets={K.scheduled: [(b"{}", float("inf"))], K.dead: [(b"\xff", float("-inf"))]},
            lease=None,
            periodic={"last": b"inf", "state": b"\xff"},
            silent=None,
            oversized=True,
        ),
        batch={"created_at": b"1e400", "pending": b"nan", "description": b"\x1b[31m"},
    )
    def check(world: World, batch: dict[str, bytes]) -> None:
        store.flushdb()
        write(store, world, CHILD)
        if batch:
            store.hset(K.batch("b1"), mapping=batch)
            store.zadd(K.batches, {"b1": 1.0})
        for command in COMMANDS:
            for extra in ([], ["--json"]):
                result = runner.invoke(main, [*command, *extra, "--redis-url", redis_url])
                shown = f"{command} {extra}: exit {result.exit_code}\n{result.output[-2000:]}"
                # ok, a runtime failure, or "no such batch" (exitcodes.py)
                assert result.exit_code in (0, 1, exitcodes.NOT_FOUND), shown
                assert not isinstance(result.exception, Exception), (shown, result.exception)
                assert "Traceback" not in result.output, shown
        for page in PAGES:
            response = web.get(page)
            assert response.status_code < 500, (page, response.text[-2000:])

    check()


# -- one job's keys: its status, attempts, result and the cancels set (issue 23) --
JID = "fuzzjob00000000000000000"
ATTEMPT_FIELDS = ["started_at", "ended_at", "outcome", "error_class", "error_message", "worker"]
json_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities: json.dumps writes them, as a forger would
    st.text(max_size=12),
    st.sampled_from(["inf", "nan", "1e400", "\r\nattempt 9: forged", "jm1.00000000.AAAA"]),
    st.lists(st.integers(), max_size=2),
)
attempt_entries = st.one_of(
    values,
    st.dictionaries(
        st.sampled_from([*ATTEMPT_FIELDS, "job", "queue", "error_sealed"]), json_values
    ).map(lambda fields: json.dumps(fields).encode()),
    st.sampled_from([b"[]", b"null", b'"text"', b"{", b"\xff\xfe"]),
)
kinds = st.sampled_from(["hash", "list", "zset", "string"])


@dataclass
class JobWorld:
    status: bytes | str  # a value, or a key of another type (a kind)
    attempts: list[bytes] | str
    result: bytes | str | None
    cancels: list[bytes] | str | None
    oversized: bool  # one attempt and the result past the bounds a read keeps


job_worlds = st.builds(
    JobWorld,
    status=st.one_of(values, st.sampled_from([b"complete", b"queued", b"dead"]), kinds),
    attempts=st.one_of(st.lists(attempt_entries, max_size=4), kinds),
    result=st.one_of(st.none(), values, st.just(b"jm1.00000000.AAAA"), kinds),
    cancels=st.one_of(st.none(), st.lists(values, min_size=1, max_size=3), kinds),
    oversized=st.booleans(),
)


def write_kind(store: redis.Redis, key: str, kind: str) -> None:
    if kind == "hash":
        store.hset(key, "a", "b")
    else:
        write_wrong_type(store, key, kind)


def write_job(store: redis.Redis, world: JobWorld) -> None:
    for key, value in [(K.status(JID), world.status), (K.result(JID), world.result)]:
        if isinstance(value, str):
            write_kind(store, key, value)
        elif value is not None:
            store.set(key, value)
    if isinstance(world.attempts, str):
        write_kind(store, K.attempts(JID), world.attempts)
    elif world.attempts:
        store.rpush(K.attempts(JID), *world.attempts)
    if isinstance(world.cancels, str):
        write_kind(store, K.cancels, world.cancels)
    elif world.cancels:
        store.zadd(K.cancels, {member: 1.0 for member in world.cancels})
    if world.oversized and not isinstance(world.attempts, str):
        store.rpush(K.attempts(JID), b'{"error_message": "' + b"x" * BIG + b'"}')
    if world.oversized and world.result is None:
        store.set(K.result(JID), b'"' + b"x" * BIG + b'"')


def test_any_value_of_a_job_gets_an_answer_from_its_page_status_result_and_cancel(
    redis_url: str, web: TestClient
) -> None:
    from jobmaster.client import Client
    from jobmaster.errors import JobmasterError

    store = redis.Redis.from_url(redis_url)
    producer = Client(redis_url)
    runner = CliRunner()

    @FUZZ
    @given(world=job_worlds)
    @example(world=JobWorld(b"\xff\xfe", [b"garbage", b"[]"], "list", "string", True))
    @example(world=JobWorld("hash", [b'{"started_at": "inf"}'], None, None, False))
    @example(world=JobWorld(b"complete", "string", b"jm1.00000000.AAAA", [b"\xff"], True))
    def check(world: JobWorld) -> None:
        store.flushdb()
        write_job(store, world)
        page = web.get(f"/jobs/{JID}")
        assert page.status_code < 500, page.text[-2000:]
        for command in (["status", JID], ["status", JID, "--json"], ["cancel", JID]):
            result = runner.invoke(main, [*command, "--redis-url", redis_url])
            shown = f"{command}: exit {result.exit_code}\n{result.output[-2000:]}"
            # An answer, with its documented exit code: unknown (a forged type
            # reads as absent), cancelled, or too late to cancel.
            assert result.exit_code in (0, 1, exitcodes.NOT_FOUND, exitcodes.REFUSED), shown
            assert not isinstance(result.exception, Exception), (shown, result.exception)
            assert "Traceback" not in result.output, shown
        # An answer: unknown, pending, failed, or a result no key opens.
        with contextlib.suppress(JobmasterError):
            producer.result(JID)
        for attempt in producer.attempts(JID):
            assert set(attempt) <= {*ATTEMPT_FIELDS, "job", "queue"}

    check()
