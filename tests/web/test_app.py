"""The dashboard app in process (Starlette's TestClient): every page renders,
job data is escaped, secrets never show, POSTs need the CSRF token, and a
password (or token) guards everything once set."""

from __future__ import annotations

import json
import re
import time

import pytest
import redis
from starlette.testclient import TestClient

import jobmaster
from jobmaster import payload as wire
from jobmaster.api import DeadSet, ProcessSet, Queue
from jobmaster.client import Client
from jobmaster.config import load_config
from jobmaster.keys import Keys
from jobmaster.web import create_app
from tests.secrets_check import assert_no_secret
from tests.web.conftest import LOCAL

pytestmark = pytest.mark.timeout(60)

PAGES = ["/", "/busy", "/queues", "/queues/default", "/scheduled", "/retries", "/dead"]
PAGES += ["/periodic", "/batches", "/jobs", "/jobs/0123456789abcdef01234567"]
XSS = "<script>alert('pwned')</script>"


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "no CSRF token in the page"
    return found.group(1)


def bury(conn: redis.Redis, job: str, args: list[object], error: str = "ValueError") -> str:
    """A job in the dead set, as a worker would have left it."""
    payload = wire.build(job, args, {}, queue="default")
    payload |= {"error_class": error, "error_message": "boom", "died_at": 1.0}
    payload["error_backtrace"] = ["Traceback (most recent call last):", f"{error}: boom"]
    conn.zadd(Keys().dead, {wire.encode(payload): 1_700_000_000})
    return str(payload["jid"])


def test_every_page_renders(client: TestClient, conn: redis.Redis) -> None:
    Client(connection=conn).push({"job": "tests.count", "args": [1]})
    bury(conn, "tests.count", [2])
    for path in PAGES:
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text[:500])
        assert "content-security-policy" in answer.headers
    assert client.get("/stats.json").json()["enqueued"] == 1
    assert client.get("/chart.svg").headers["content-type"].startswith("image/svg+xml")


def test_job_data_is_escaped_everywhere(client: TestClient, conn: redis.Redis) -> None:
    Client(connection=conn).push({"job": "tests.count", "args": [XSS], "kwargs": {"k": XSS}})
    jid = bury(conn, "tests.count", [XSS], error=XSS)
    for path in ["/queues/default", "/dead", f"/jobs/{jid}", "/dead?q=script"]:
        html = client.get(path).text
        assert XSS not in html, path
        assert "&lt;script&gt;" in html, path


def test_post_without_csrf_token_is_refused(client: TestClient, conn: redis.Redis) -> None:
    Queue("default", conn).pause()  # known queue, paused
    refused = client.post("/queues/default/action", data={"op": "resume"})
    assert refused.status_code == 403
    wrong = client.post("/queues/default/action", data={"op": "resume", "csrf_token": "x"})
    assert wrong.status_code == 403
    assert Queue("default", conn).is_paused()
    token = csrf_of(client.get("/queues").text)
    done = client.post("/queues/default/action", data={"op": "resume", "csrf_token": token})
    assert done.status_code == 303
    assert not Queue("default", conn).is_paused()


def test_dead_actions_retry_one_selected_and_all(client: TestClient, conn: redis.Redis) -> None:
    jids = [bury(conn, "tests.count", [n]) for n in range(5)]
    token = csrf_of(client.get("/dead").text)
    client.post("/sets/dead/action", data={"one": f"retry:{jids[0]}", "csrf_token": token})
    assert Queue("default", conn).size() == 1
    data = {"op": "delete", "jid": jids[1:3], "csrf_token": token}
    answer = client.post("/sets/dead/action", data=data)
    assert answer.status_code == 303
    assert DeadSet(conn).size() == 2
    assert "deleted 2 job(s)" in client.get("/dead").text  # the message, shown once
    client.post("/sets/dead/action?all=1", data={"op": "retry", "csrf_token": token})
    assert DeadSet(conn).size() == 0
    assert Queue("default", conn).size() == 3


def test_retries_and_scheduled_jobs_can_be_killed_the_dead_set_has_no_kill(
    client: TestClient, conn: redis.Redis
) -> None:
    producer = Client(connection=conn)
    later = [producer.push({"job": "tests.count", "args": [n], "at": 4e9}) for n in range(3)]
    page = client.get("/scheduled").text
    assert f'value="kill:{later[0]}"' in page and "Kill selected" in page
    token = csrf_of(page)
    client.post("/sets/scheduled/action", data={"one": f"kill:{later[0]}", "csrf_token": token})
    assert [entry.jid for entry in DeadSet(conn)] == [later[0]]
    client.post("/sets/scheduled/action?all=1", data={"op": "kill", "csrf_token": token})
    assert "killed 2 job(s)" in client.get("/scheduled").text
    assert DeadSet(conn).size() == 3 and conn.zcard(Keys().scheduled) == 0

    dead = client.get("/dead").text
    assert "kill:" not in dead and "Kill selected" not in dead
    refused = client.post("/sets/dead/action?all=1", data={"op": "kill", "csrf_token": token})
    assert refused.status_code == 303
    assert "unknown action &#39;kill&#39;" in client.get("/dead").text
    assert DeadSet(conn).size() == 3  # nothing moved


def test_search_filters_by_job_and_error(client: TestClient, conn: redis.Redis) -> None:
    bury(conn, "tests.count", [1], error="TimeoutError")
    bury(conn, "tests.record", ["m"], error="KeyError")
    html = client.get("/dead", params={"q": "timeout"}).text
    assert "TimeoutError" in html
    assert "tests.record" not in html
    assert "tests.record" in client.get("/dead", params={"q": "RECORD"}).text


def test_secrets_are_never_rendered(redis_url: str, conn: redis.Redis) -> None:
    secrets = {"secret_key": "s3cret-key-material", "web_password": "pa55-word-xyz"}
    config = load_config(
        None, {"redis_url": redis_url, "secret_key": secrets["secret_key"], **secrets}
    )
    bury(conn, "tests.count", [1])
    with TestClient(create_app(config), base_url=LOCAL) as test_client:
        token = csrf_of(test_client.get("/login").text)
        test_client.post("/login", data={"password": secrets["web_password"], "csrf_token": token})
        for path in [*PAGES, "/stats.json"]:
            answer = test_client.get(path)
            assert answer.status_code == 200, path
            assert_no_secret(answer.text, secrets, path)
            assert_no_secret(str(answer.headers), secrets, path)


def test_password_guards_pages_and_actions(redis_url: str, conn: redis.Redis) -> None:
    secrets = {"web_password": "the right one", "web_token": "a-token-for-scripts"}
    config = load_config(None, {"redis_url": redis_url, **secrets})
    with TestClient(create_app(config), base_url=LOCAL, follow_redirects=False) as test_client:
        first = test_client.get("/dead")
        assert first.status_code == 303
        assert first.headers["location"].startswith("/login?next=%2Fdead")
        assert test_client.get("/stats.json").status_code == 401
        token = csrf_of(test_client.get("/login").text)
        wrong = test_client.post("/login", data={"password": "wrong", "csrf_token": token})
        assert wrong.status_code == 401
        login = {"password": "the right one", "csrf_token": token, "next": "//evil.example/"}
        answer = test_client.post("/login", data=login)
        assert answer.headers["location"] == "/"  # never an open redirect
        assert test_client.get("/dead").status_code == 200
        bearer = {"authorization": "Bearer a-token-for-scripts"}
        with TestClient(create_app(config), base_url=LOCAL) as script:
            assert script.get("/stats.json", headers=bearer).status_code == 200
            wrong_bearer = {"authorization": "Bearer nope"}
            assert script.get("/stats.json", headers=wrong_bearer).status_code == 401


def test_mounted_under_a_prefix(redis_url: str, conn: redis.Redis) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    config = load_config(None, {"redis_url": redis_url})
    outer = Starlette(routes=[Mount("/ops/jobs", app=create_app(config))])
    Queue("default", conn).pause()
    with TestClient(outer, base_url=LOCAL, follow_redirects=False) as test_client:
        html = test_client.get("/ops/jobs/queues").text
        assert 'href="/ops/jobs/static/app.css"' in html
        assert 'action="/ops/jobs/queues/default/action"' in html
        token = csrf_of(html)
        data = {"op": "resume", "csrf_token": token}
        answer = test_client.post("/ops/jobs/queues/default/action", data=data)
        assert answer.headers["location"] == "/ops/jobs/queues"
        assert test_client.get("/ops/jobs/static/app.js").status_code == 200
    assert not Queue("default", conn).is_paused()


def test_busy_control_reaches_the_control_list(client: TestClient, conn: redis.Redis) -> None:
    keys = Keys()
    conn.hset(keys.heartbeat("host:1:m"), mapping={"role": "master", "pid": 1, "quiet": 0})
    conn.sadd(keys.masters, "host:1:m")
    token = csrf_of(client.get("/busy").text)
    data = {"identity": "host:1:m", "command": "quiet", "csrf_token": token}
    client.post("/busy/control", data=data)
    assert conn.lrange(keys.control("host:1:m"), 0, -1) == [b"quiet"]
    assert ProcessSet(conn).get("host:1:m") is not None


def test_busy_shows_a_master_s_container_usage_against_its_limit(
    client: TestClient, conn: redis.Redis
) -> None:
    keys = Keys()
    beat = {"role": "master", "pid": 1, "quiet": 0, "max_child_mb": 149}
    beat |= {"memory_limit_mb": 600, "memory_used_mb": 552}
    conn.hset(keys.heartbeat("host:1:m"), mapping=beat)
    conn.sadd(keys.masters, "host:1:m")
    html = client.get("/busy").text
    assert "552 MB / 600 MB container" in html
    assert "limit 149 MB per child" in html
    assert 'class="bar warn"' in html  # 92 %: over the bar's warning line


def test_job_page_shows_status_and_attempts(client: TestClient, conn: redis.Redis) -> None:
    jid = bury(conn, "tests.count", [1])
    keys = Keys()
    conn.set(keys.status(jid), "dead")
    attempt = {"started_at": 10.0, "ended_at": 12.5, "outcome": "dead", "worker": "w1"}
    conn.rpush(keys.attempts(jid), jobmaster.payload.encode(attempt))
    html = client.get(f"/jobs/{jid}").text
    assert '<td class="status">dead</td>' in html
    assert '<td class="outcome">dead</td>' in html
    assert "2.5s" in html
    assert client.get("/jobs", params={"jid": jid}).headers["location"] == f"/jobs/{jid}"


def test_delete_one_job_of_a_queue_page(client: TestClient, conn: redis.Redis) -> None:
    producer = Client(connection=conn)
    keep = producer.push({"job": "tests.count", "args": [1]})
    drop = producer.push({"job": "tests.count", "args": [2]})
    html = client.get("/queues/default").text
    assert keep in html
    assert drop in html
    data = {"op": "delete", "jid": drop, "csrf_token": csrf_of(html)}
    answer = client.post("/queues/default/action", data=data)
    assert answer.headers["location"] == "/queues/default"
    assert [r.jid for r in Queue("default", conn)] == [keep]


def test_busy_names_the_job_blocking_a_child_s_event_loop(
    client: TestClient, conn: redis.Redis
) -> None:
    keys = Keys()
    blocked = {"jid": "j<1>", "job": "app.jobs.<sleepy>", "since": time.time() - 3}
    beat = {"pid": 7, "quiet": 0, "concurrency": 5, "busy": 2, "async_concurrency": 100}
    beat |= {"loop_blocked": json.dumps(blocked)}
    conn.hset(keys.heartbeat("host:7:w"), mapping=beat)
    conn.sadd(keys.processes, "host:7:w")
    html = client.get("/busy").text
    assert "event loop blocked by app.jobs.&lt;sleepy&gt; (j&lt;1&gt;)" in html
    assert "2/5 <small>+100 async</small>" in html
    conn.hset(keys.heartbeat("host:7:w"), "loop_blocked", "[not what a worker writes")
    assert "event loop blocked" not in client.get("/busy").text
