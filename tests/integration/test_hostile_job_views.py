"""A job's page and ``jobmaster status`` read forged status and attempts
tolerantly, and never whole (issue 23, items 2 and 7).

The review: ``RPUSH attempts:J garbage`` made ``/jobs/J`` a 500
(JSONDecodeError) and ``jobmaster status J`` a traceback; an attempt ``[]``
raised AttributeError; ``{"started_at": "inf"}`` TypeError; a status key of
another type WRONGTYPE; a status of the bytes ``\\xff\\xfe``
UnicodeDecodeError. Five 100 MB attempts cost the page 3.2 s and 1.1 GB and
``status`` 1.2 GB. And a ``\\r\\n`` in a forged error faked lines of output.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

from jobmaster import exitcodes
from jobmaster.cli import main
from jobmaster.config import load_config
from jobmaster.keys import Keys
from jobmaster.web import create_app

pytestmark = pytest.mark.timeout(120)
K = Keys()
JID = "forged0000000000000000000"
LOCAL = "http://localhost"
FAKED = "fake line\r\n  attempt 9: complete in 1 ms on trusted-host"

# (what is forged, how): each alone made the page or the command fail.
FORGERIES = {
    "garbage attempt": lambda s: s.rpush(K.attempts(JID), b"garbage"),
    "list attempt": lambda s: s.rpush(K.attempts(JID), b"[]"),
    "non-finite times": lambda s: s.rpush(
        K.attempts(JID), json.dumps({"started_at": "inf", "ended_at": "nan"})
    ),
    "number fields": lambda s: s.rpush(
        K.attempts(JID), b'{"started_at": 1e999, "ended_at": true, "outcome": 5, "worker": []}'
    ),
    "bytes attempt": lambda s: s.rpush(K.attempts(JID), b"\xff\xfe{"),
    "attempts of another type": lambda s: s.set(K.attempts(JID), "x"),
    "status a hash": lambda s: (s.delete(K.status(JID)), s.hset(K.status(JID), "a", "b")),
    "status bytes": lambda s: s.set(K.status(JID), b"\xff\xfe"),
    "result a list": lambda s: (s.set(K.status(JID), "complete"), s.rpush(K.result(JID), "x")),
    "result bytes": lambda s: (s.set(K.status(JID), "complete"), s.set(K.result(JID), b"\xff")),
    "cancels a string": lambda s: (s.set(K.status(JID), "queued"), s.set(K.cancels, "x")),
    "dead set a hash": lambda s: s.hset(K.dead, "a", "b"),
    "retry set a hash": lambda s: (s.set(K.status(JID), "retrying"), s.hset(K.retry, "a", "b")),
    "scheduled a hash": lambda s: (
        s.set(K.status(JID), "scheduled"),
        s.hset(K.scheduled, "a", "b"),
    ),
}


@pytest.fixture
def web(redis_url: str) -> Iterator[TestClient]:
    config = load_config(None, {"redis_url": redis_url})
    with TestClient(create_app(config), base_url=LOCAL, follow_redirects=False) as client:
        yield client


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_status_or_attempt_gets_an_answer(
    forgery: str, redis_url: str, web: TestClient, store: redis.Redis
) -> None:
    store.set(K.status(JID), "dead")
    FORGERIES[forgery](store)
    page = web.get(f"/jobs/{JID}")
    assert page.status_code == 200, page.text[-2000:]
    for extra in ([], ["--json"]):
        result = CliRunner().invoke(main, ["status", JID, *extra, "--redis-url", redis_url])
        # A status key forged as a hash reads as absent: "unknown", exit 6.
        unknown = forgery == "status a hash"
        assert result.exit_code == (exitcodes.NOT_FOUND if unknown else 0), (
            result.output,
            result.exception,
        )
        assert "Traceback" not in result.output
    cancel = CliRunner().invoke(main, ["cancel", JID, "--redis-url", redis_url])
    assert "Traceback" not in cancel.output and not isinstance(cancel.exception, TypeError)


def test_a_forged_error_fakes_no_line(redis_url: str, store: redis.Redis) -> None:
    store.set(K.status(JID), "dead")
    attempt = {"started_at": 1, "ended_at": 2, "outcome": "dead", "error_class": "E"}
    store.rpush(K.attempts(JID), json.dumps({**attempt, "error_message": FAKED}))
    entry = {"jid": JID, "job": "x", "queue": "q", "error_class": "E", "error_message": FAKED}
    store.zadd(K.dead, {json.dumps(entry): 1.0})
    status = CliRunner().invoke(main, ["status", JID, "--redis-url", redis_url])
    assert len(status.output.splitlines()) == 2, status.output  # the status, one attempt
    assert "\\x0d\\x0a" in status.output
    shown = CliRunner().invoke(main, ["dead", "show", JID, "--redis-url", redis_url])
    lines = shown.output.split("entry:")[0].splitlines()
    assert not any(line.lstrip().startswith("attempt 9") for line in lines), shown.output


BIG = 100 * 1024 * 1024
MIB = 1024 * 1024


@pytest.fixture
def five_big_attempts(store: redis.Redis) -> None:
    store.set(K.status(JID), "dead")
    store.rpush(K.attempts(JID), json.dumps({"started_at": 1, "ended_at": 2, "outcome": "retry"}))
    block = b'{"error_message": "' + b"x" * BIG + b'"}'
    for _ in range(5):
        store.rpush(K.attempts(JID), block)


@pytest.mark.usefixtures("five_big_attempts")
def test_a_page_view_next_to_five_100_mb_attempts_stays_small(web: TestClient) -> None:
    tracemalloc.start()
    try:
        page = web.get(f"/jobs/{JID}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page.status_code == 200
    assert peak < 50 * MIB, f"a page view allocated {peak / MIB:.0f} MiB"


@pytest.mark.usefixtures("five_big_attempts")
def test_status_next_to_five_100_mb_attempts_stays_small(redis_url: str) -> None:
    """In process (CliRunner), so tracemalloc sees every allocation of the read: a
    subprocess's ru_maxrss would carry over this test process's own high water."""
    tracemalloc.start()
    try:
        result = CliRunner().invoke(main, ["status", JID, "--redis-url", redis_url])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    assert peak < 50 * MIB, f"jobmaster status allocated {peak / MIB:.0f} MiB"
    assert "Unreadable" in result.output and "not read" in result.output  # said, not hidden


def test_a_long_history_of_small_attempts_is_read_to_its_newest(
    redis_url: str, store: redis.Redis
) -> None:
    """Many attempts (a job with a huge ``retry``) are over the size budget in
    all, but small each: the newest are read, not refused as forged."""
    store.set(K.status(JID), "retrying")
    entry = {"started_at": 1, "ended_at": 2, "outcome": "retrying", "error_message": "e" * 900}
    store.rpush(K.attempts(JID), *[json.dumps({**entry, "worker": f"w{n}"}) for n in range(5000)])
    result = CliRunner().invoke(main, ["status", JID, "--json", "--redis-url", redis_url])
    tries = json.loads(result.output)["attempts"]
    assert len(tries) == 50 and tries[-1]["worker"] == "w4999"
