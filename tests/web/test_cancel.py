"""The dashboard's Cancel buttons, in process (Starlette's TestClient): on the
job page and on each running job of the Busy page, each a POST with the CSRF
token, like every other action. The browser drives the Busy page's button
against a real master in tests/web/test_browser.py."""

from __future__ import annotations

import re

import pytest
import redis
from starlette.testclient import TestClient

from jobmaster import payload as wire
from jobmaster.api import Queue
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.web.test_app import csrf_of

pytestmark = pytest.mark.timeout(60)
K = Keys()


def running_job(conn: redis.Redis) -> str:
    """A job held by a live worker process, as the Busy page lists it."""
    identity = "host:1:w"
    conn.hset(K.heartbeat(identity), mapping={"identity": identity, "pid": 1, "quiet": 0})
    conn.sadd(K.processes, identity)
    payload = wire.build("tests.record", ["slow", 30.0], {}, queue="default")
    conn.lpush(K.inprogress(identity), wire.encode(payload))
    conn.set(K.status(payload["jid"]), "working", ex=60)
    return str(payload["jid"])


def requested(conn: redis.Redis) -> list[bytes]:
    return conn.zrange(K.cancels, 0, -1)


def test_the_busy_page_cancels_a_running_job_and_comes_back(
    client: TestClient, conn: redis.Redis
) -> None:
    jid = running_job(conn)
    html = client.get("/busy").text
    form = re.search(
        rf'<form method="post" action="/jobs/{jid}/cancel"[^>]*>(.*?)</form>', html, re.S
    )
    assert form is not None, "no Cancel button on the running job"
    assert 'name="back" value="/busy"' in form.group(1) and ">Cancel</button>" in form.group(1)

    done = client.post(f"/jobs/{jid}/cancel", data={"back": "/busy", "csrf_token": csrf_of(html)})

    assert done.status_code == 303 and done.headers["location"] == "/busy"
    assert requested(conn) == [jid.encode()]  # every worker hears it at once
    # No worker runs here to confirm it: said so, after the button's wait.
    assert "cancel sent, not confirmed" in client.get("/busy").text  # the flash, once


def test_the_job_page_cancels_a_queued_job(client: TestClient, conn: redis.Redis) -> None:
    jid = Client(connection=conn).push({"job": "tests.record", "args": ["x"]})
    assert jid is not None
    html = client.get(f"/jobs/{jid}").text
    assert f'action="/jobs/{jid}/cancel"' in html

    done = client.post(f"/jobs/{jid}/cancel", data={"csrf_token": csrf_of(html)})

    assert done.headers["location"] == f"/jobs/{jid}"
    page = client.get(f"/jobs/{jid}").text
    assert "removed from queue default" in page
    assert '<td class="status">cancelled</td>' in page
    assert f'action="/jobs/{jid}/cancel"' not in page  # ended: no button any more
    assert Queue("default", conn).size() == 0


def test_a_cancel_without_the_csrf_token_is_refused(client: TestClient, conn: redis.Redis) -> None:
    jid = running_job(conn)
    assert client.post(f"/jobs/{jid}/cancel", data={"back": "/busy"}).status_code == 403
    wrong = client.post(f"/jobs/{jid}/cancel", data={"csrf_token": "forged"})
    assert wrong.status_code == 403
    assert requested(conn) == []


def test_back_goes_only_to_the_two_pages_with_the_button(
    client: TestClient, conn: redis.Redis
) -> None:
    jid = running_job(conn)
    token = csrf_of(client.get("/busy").text)
    done = client.post(f"/jobs/{jid}/cancel", data={"back": "//evil.example/", "csrf_token": token})
    assert done.headers["location"] == f"/jobs/{jid}"


def test_an_ended_job_has_no_button_and_a_late_post_says_so(
    client: TestClient, conn: redis.Redis
) -> None:
    jid = "0123456789abcdef01234567"
    conn.set(K.status(jid), "complete")
    html = client.get(f"/jobs/{jid}").text
    assert "/cancel" not in html
    token = csrf_of(client.get("/busy").text)  # the session's token, from a page with a form
    client.post(f"/jobs/{jid}/cancel", data={"csrf_token": token})
    assert "it has already ended (complete)" in client.get(f"/jobs/{jid}").text
