"""The RETRIES the sets show are the retries made, not the failures.

``retry_count`` (the wire field) counts failures, the first run's included,
so a job with ``retry=1`` died with ``retry_count`` 2 and the dead set said
"2 retries" of a job that was retried once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

from jobmaster.api import DeadSet
from jobmaster.cli import main
from jobmaster.client import Client
from jobmaster.config import Config, load_config
from jobmaster.keys import Keys
from jobmaster.web import create_app
from jobmaster.worker.process import WorkerProcess
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
K = Keys()


@pytest.fixture
def died_after_one_retry(
    make_config: Callable[..., Config],
    running_worker: Callable[[Config], WorkerProcess],
    client: Client,
    store: redis.Redis,
) -> str:
    """tests.fails with retry=1, run by a worker: two failures, one retry, dead."""
    jid = client.push({"job": "tests.fails", "args": ["once"], "retry": 1})
    assert jid is not None
    running_worker(make_config())
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=20, message="job dead")
    assert store.hget("test:attempts", "once") == b"2"
    return jid


def test_the_dead_set_shows_the_retries_made(died_after_one_retry: str, redis_url: str) -> None:
    [entry] = list(DeadSet(Client(redis_url)))
    assert (entry.retry_count, entry.retries) == (2, 1)
    runner = CliRunner()
    listed = runner.invoke(main, ["dead", "list", "--redis-url", redis_url])
    assert listed.exit_code == 0, listed.output
    header, row = listed.output.splitlines()
    assert header.split()[-1] == "RETRIES" and row.split()[-1] == "1"
    shown = runner.invoke(main, ["dead", "show", died_after_one_retry, "--redis-url", redis_url])
    assert "retries:  1\n" in shown.output
    data = json.loads(
        runner.invoke(main, ["dead", "list", "--json", "--redis-url", redis_url]).output
    )
    assert (data[0]["retries"], data[0]["retry_count"]) == (1, 2)  # the wire field stays


def test_the_dashboards_dead_page_shows_the_retries_made(
    died_after_one_retry: str, redis_url: str
) -> None:
    config = load_config(None, {"redis_url": redis_url}, env={})
    with TestClient(create_app(config), base_url="http://localhost") as web:
        html = web.get("/dead").text
    row = html[html.index(f'data-jid="{died_after_one_retry}"') :]
    cells = re.findall(r'<td class="num">(\d+)</td>', row)
    assert cells[0] == "1"
