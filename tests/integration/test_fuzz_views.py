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

import os
from collections.abc import Iterator

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
from tests.integration.test_fuzz_redis_values import World, values, worlds, write

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

    @settings(
        max_examples=int(os.environ.get("JOBMASTER_FUZZ_VIEWS", "20")),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        # No "explain" phase: it traces every line, and each command makes new
        # connections whose setup reads package metadata: minutes per example.
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
    )
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
