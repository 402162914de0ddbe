"""Sentry across a real worker: sentry_sdk.init in the app module (the master,
preloaded), events sent by each forked child through sentry-sdk's own HTTP
transport to a collector in this test, which reads their envelopes."""

from __future__ import annotations

import gzip
import json
import signal
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis

from jobmaster import exitcodes
from jobmaster.client import Client
from jobmaster.keys import Keys
from jobmaster.workflows.batch import Batch
from jobmaster.workflows.signature import Signature
from tests.helpers import holds_for, wait_until
from tests.process.conftest import JobmasterProcess, wait_for_worker

sentry_sdk = pytest.importorskip("sentry_sdk")
from sentry_sdk.envelope import Envelope  # noqa: E402

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
K = Keys()
APP = ["tests.contrib.sentry_app"]
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


class Collector:
    """A Sentry ingest endpoint on loopback that keeps the events it receives."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                envelope = Envelope.deserialize(body)
                with collector.lock:
                    for item in envelope.items:
                        if item.type == "event" and item.payload.json is not None:
                            collector.events.append(item.payload.json)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def dsn(self) -> str:
        return f"http://publickey@127.0.0.1:{self.server.server_address[1]}/1"

    def received(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    found = Collector()
    yield found
    found.close()


def tags_of(event: dict[str, Any]) -> dict[str, str]:
    tags = event.get("tags", {})
    return dict(tags) if isinstance(tags, dict) else {k: v for k, v in tags}


def start(run: Run, write: Write, store: redis.Redis, collector: Collector, report: str) -> Any:
    config = write(app=APP, processes=2)
    env = {"SENTRY_TEST_DSN": collector.dsn, "SENTRY_TEST_REPORT": report}
    master = run("-c", str(config), env=env)
    wait_for_worker(store, master)
    return master


def test_one_event_per_death_with_the_jobs_tags(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    collector: Collector,
) -> None:
    master = start(run_jobmaster, write_config, store, collector, "deaths")
    client = Client(redis_url)
    dead_at_once = client.push({"job": "tests.contrib.sentry_app.charge", "args": [7]})
    retried_then_dead = client.push({"job": "tests.contrib.sentry_app.flaky", "args": [8]})
    client.push({"job": "tests.contrib.sentry_app.fine", "args": [9]})
    batch = Batch(client=client)
    (in_batch,) = batch.add(Signature("tests.contrib.sentry_app.charge", (10,)))

    wait_until(lambda: store.zcard(K.dead) == 3, timeout=30, message="three jobs dead")
    wait_until(lambda: len(collector.received()) >= 3, timeout=20, message="three events")
    # flaky failed twice (a retry, then its death): still one event, for the death.
    holds_for(1.0, lambda: len(collector.received()) == 3, "one event per death, no more")

    by_jid = {tags_of(e)["jobmaster.jid"]: e for e in collector.received()}
    assert set(by_jid) == {dead_at_once, retried_then_dead, in_batch}
    assert tags_of(by_jid[in_batch])["jobmaster.batch"] == batch.bid
    assert by_jid[in_batch]["contexts"]["jobmaster"]["batch"] == batch.bid
    charge, flaky = by_jid[dead_at_once], by_jid[retried_then_dead]
    assert tags_of(charge) == {
        "jobmaster.job": "tests.contrib.sentry_app.charge",
        "jobmaster.queue": "default",
        "jobmaster.jid": dead_at_once,
        "jobmaster.attempt": "1",
        "jobmaster.outcome": "dead",
    }
    assert tags_of(flaky)["jobmaster.attempt"] == "2"
    assert tags_of(flaky)["jobmaster.outcome"] == "dead"
    for event, name in ((charge, "charge"), (flaky, "flaky")):
        assert event["fingerprint"] == ["jobmaster", f"tests.contrib.sentry_app.{name}"]
        assert event["transaction"] == f"tests.contrib.sentry_app.{name}"
        assert event["contexts"]["jobmaster"]["job"] == f"tests.contrib.sentry_app.{name}"
        (exception,) = event["exception"]["values"]
        assert exception["type"] == "PaymentDeclined"
        assert exception["mechanism"] == {"type": "jobmaster", "handled": False}
        assert event["level"] == "error"
    # Sent by the children (their sender thread started after fork), not the master.
    assert {e["contexts"]["jobmaster"]["jid"] for e in collector.received()} == set(by_jid)

    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK


def test_every_failure_is_reported_when_asked(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    collector: Collector,
) -> None:
    master = start(run_jobmaster, write_config, store, collector, "failures")
    jid = Client(redis_url).push({"job": "tests.contrib.sentry_app.flaky", "args": [1]})
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=30, message="the job dead")
    wait_until(lambda: len(collector.received()) >= 2, timeout=20, message="two events")
    holds_for(1.0, lambda: len(collector.received()) == 2, "one event per attempt, no more")
    outcomes = sorted(
        (tags_of(e)["jobmaster.attempt"], tags_of(e)["jobmaster.outcome"])
        for e in collector.received()
    )
    assert outcomes == [("1", "retry"), ("2", "dead")]
    assert {tags_of(e)["jobmaster.jid"] for e in collector.received()} == {jid}
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK
    assert json.loads(store.zrange(K.dead, 0, -1)[0])["jid"] == jid


def test_a_poison_pill_buried_by_the_master_is_reported_as_a_death(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    collector: Collector,
) -> None:
    """No job code saw it end: the worker running its failure hook reports it."""
    config = write_config(app=APP, processes=1, max_crashes=1)
    env = {"SENTRY_TEST_DSN": collector.dsn, "SENTRY_TEST_REPORT": "deaths"}
    master = run_jobmaster("-c", str(config), env=env)
    wait_for_worker(store, master)
    jid = Client(redis_url).push({"job": "tests.contrib.sentry_app.pill", "args": [3]})
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=30, message="the pill buried")
    wait_until(lambda: len(collector.received()) >= 1, timeout=20, message="its event")
    holds_for(1.0, lambda: len(collector.received()) == 1, "one event, no more")
    (event,) = collector.received()
    assert tags_of(event)["jobmaster.jid"] == jid
    assert tags_of(event)["jobmaster.job"] == "tests.contrib.sentry_app.pill"
    assert tags_of(event)["jobmaster.outcome"] == "dead"
    assert event["fingerprint"] == ["jobmaster", "tests.contrib.sentry_app.pill"]
    (exception,) = event["exception"]["values"]
    assert exception["type"] == "PoisonPill"
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK
