"""The job's page names the job, its queue and its arguments (issue 24, item 11),
tolerant of forged values; an encrypt=True job's arguments stay hidden."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest
import redis
from starlette.testclient import TestClient

from jobmaster import payload as wire
from jobmaster.api.base import Backend
from jobmaster.api.queues import find_queued
from jobmaster.api.records import PEEK_BYTES
from jobmaster.keys import Keys

pytestmark = pytest.mark.timeout(60)
K = Keys()


def facts_of(html: str) -> str:
    return html.split('<table class="facts">', 1)[1].split("</table>", 1)[0]


def test_a_waiting_job_shows_its_name_queue_and_arguments(
    client: TestClient, conn: redis.Redis
) -> None:
    payload = wire.build("tests.send_mail", ["ann@example.com"], {"urgent": True}, queue="mail")
    conn.zadd(K.scheduled, {wire.encode(payload): time.time() + 60})
    conn.set(K.status(payload["jid"]), "scheduled")
    shown = facts_of(client.get(f"/jobs/{payload['jid']}").text)
    assert "tests.send_mail" in shown and ">mail</a>" in shown
    assert "ann@example.com" in shown and "urgent=true" in shown


def test_an_encrypted_jobs_arguments_stay_hidden(client: TestClient, conn: redis.Redis) -> None:
    payload = wire.build("tests.pay", [], {}, queue="default")
    payload["encrypted"] = "jm1.00000000.c2VjcmV0"
    conn.zadd(K.retry, {wire.encode(payload): time.time() + 60})
    conn.set(K.status(payload["jid"]), "retrying")
    shown = facts_of(client.get(f"/jobs/{payload['jid']}").text)
    assert "tests.pay" in shown and "(sealed: encrypt=True)" in shown


def test_an_ended_job_is_named_by_its_attempt(client: TestClient, conn: redis.Redis) -> None:
    conn.set(K.status("done1"), "complete")
    attempt = {"started_at": 1, "ended_at": 2, "outcome": "complete", "job": "tests.x"}
    conn.rpush(K.attempts("done1"), json.dumps({**attempt, "queue": "low"}))
    shown = facts_of(client.get("/jobs/done1").text)
    assert "tests.x" in shown and ">low</a>" in shown and "not kept" in shown


@pytest.mark.parametrize(
    "attempt",
    [b'{"job": 5, "queue": ["x"]}', b'{"job": "\\u202e<b>x", "queue": null}', b"\xff", b"[]"],
)
def test_forged_names_are_shown_as_text_or_not_at_all(
    client: TestClient, conn: redis.Redis, attempt: bytes
) -> None:
    conn.set(K.status("forged1"), "dead")
    conn.rpush(K.attempts("forged1"), attempt)
    page = client.get("/jobs/forged1")
    assert page.status_code == 200 and "<b>x" not in page.text


def test_a_sealed_result_is_shown_as_sealed(client: TestClient, conn: redis.Redis) -> None:
    conn.set(K.status("sealed1"), "complete")
    conn.set(K.result("sealed1"), "jm1.00000000.c2VjcmV0LXRva2VuLWJvZHk=")
    page = client.get("/jobs/sealed1").text
    assert "(sealed: encrypt=True" in page and "c2VjcmV0" not in page


def queue_job(conn: redis.Redis, payload: dict[str, object]) -> str:
    """As PUSH leaves a job: its entry, its queue's name known, status queued."""
    conn.lpush(K.queue(str(payload["queue"])), wire.encode(payload))
    conn.sadd(K.queues, str(payload["queue"]))
    conn.set(K.status(str(payload["jid"])), "queued")
    return str(payload["jid"])


def test_a_queued_job_shows_its_name_queue_and_arguments(
    client: TestClient, conn: redis.Redis
) -> None:
    """The rest of issue 24 item 11: a job still in a queue showed none of them."""
    conn.lpush(K.queue("mail"), wire.encode(wire.build("tests.other", [1], {}, queue="mail")))
    jid = queue_job(conn, wire.build("tests.send_mail", ["ann@example.com"], {}, queue="mail"))
    page = client.get(f"/jobs/{jid}").text
    shown = facts_of(page)
    assert "tests.send_mail" in shown and ">mail</a>" in shown
    assert "ann@example.com" in shown
    assert "queue mail" in page


def test_a_queued_encrypted_jobs_arguments_stay_hidden(
    client: TestClient, conn: redis.Redis
) -> None:
    payload = wire.build("tests.pay", [], {}, queue="default")
    payload["encrypted"] = "jm1.00000000.c2VjcmV0"
    shown = facts_of(client.get(f"/jobs/{queue_job(conn, payload)}").text)
    assert "tests.pay" in shown and "(sealed: encrypt=True)" in shown
    assert "c2VjcmV0" not in shown


HUGE = 16 * 1024 * 1024


def test_a_huge_queued_entry_is_not_read_whole_for_its_page(
    client: TestClient, conn: redis.Redis, redis_url: str
) -> None:
    """FIND_QUEUED returned the whole entry: a forged 100 MB one was read whole
    to show one page. With a byte cap, only its first bytes cross the wire."""
    jid = queue_job(conn, wire.build("tests.big", ["x" * HUGE], {}, queue="default"))
    found = find_queued(Backend.resolve(conn), jid)
    assert found is not None
    queue, head, length = found
    assert queue.name == "default" and len(head) == PEEK_BYTES and length > HUGE
    tracemalloc.start()
    try:
        page = client.get(f"/jobs/{jid}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page.status_code == 200 and len(page.content) < 1024 * 1024
    assert peak < HUGE // 4, f"the page took {peak:,} bytes"
    assert "tests.big" in facts_of(page.text)
    whole = find_queued(Backend.resolve(conn), jid, keep=0)  # as cancel needs it
    assert whole is not None and len(whole[1]) == whole[2] > HUGE
