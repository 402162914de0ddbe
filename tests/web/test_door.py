"""The dashboard's door: it answers only for its own names, takes POSTs only
from its own pages, and ``web_token = "auto"`` keeps other local users out
(issue 16, item 8).

DNS rebinding: with no password on 127.0.0.1, ``Host: attacker.example``
got ``/dead`` (job arguments, the CSRF token) and a working quiet through
``POST /busy/control``.
"""

from __future__ import annotations

import http.client
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from jobmaster.config import load_config
from jobmaster.keys import Keys
from jobmaster.web import create_app
from tests.helpers import wait_until
from tests.web.served import start_web, stop_web
from tests.web.test_app import bury, csrf_of

pytestmark = pytest.mark.timeout(60)
K = Keys()
MASTER = "host:1:m"


@pytest.fixture
def conn(redis_url: str) -> redis.Redis:
    store = redis.Redis.from_url(redis_url)
    store.hset(K.heartbeat(MASTER), mapping={"role": "master", "pid": 1, "quiet": 0})
    store.sadd(K.masters, MASTER)
    return store


def client_for(redis_url: str, base_url: str, **settings: object) -> TestClient:
    config = load_config(None, {"redis_url": redis_url, **settings})
    return TestClient(create_app(config, listen="127.0.0.1"), base_url=base_url)


def quiet(client: TestClient, token: str, **headers: str) -> int:
    data = {"identity": MASTER, "command": "quiet", "csrf_token": token}
    answer = client.post("/busy/control", data=data, headers=headers, follow_redirects=False)
    return answer.status_code


def test_a_foreign_host_gets_nothing(redis_url: str, conn: redis.Redis) -> None:
    bury(conn, "tests.count", ["secret argument"])
    with client_for(redis_url, "http://127.0.0.1:8321") as ours:
        token = csrf_of(ours.get("/busy").text)
    with client_for(redis_url, "http://attacker.example:8321") as rebound:
        for path in ("/dead", "/busy", "/stats.json", "/static/app.css"):
            answer = rebound.get(path)
            assert answer.status_code == 400 and "secret argument" not in answer.text, path
        rebound.cookies = ours.cookies
        assert quiet(rebound, token) == 400
    assert conn.llen(K.control(MASTER)) == 0


def test_the_names_it_answers_for(redis_url: str, conn: redis.Redis) -> None:
    for base in ("http://localhost:1", "http://127.0.0.1:1", "http://[::1]:1"):
        with client_for(redis_url, base) as local:
            assert local.get("/dead").status_code == 200, base
    listed = {"web_hosts": ["jobs.example.com", "*.ops.example.org"]}
    for base in ("https://jobs.example.com", "https://a.ops.example.org"):
        with client_for(redis_url, base, **listed) as named:
            assert named.get("/dead").status_code == 200, base
    with client_for(redis_url, "https://other.example.com", **listed) as other:
        assert other.get("/dead").status_code == 400


def test_a_post_from_another_origin_is_refused(redis_url: str, conn: redis.Redis) -> None:
    with client_for(redis_url, "http://127.0.0.1:8321") as ours:
        token = csrf_of(ours.get("/busy").text)
        for origin in ("http://attacker.example", "null", "http://127.0.0.1:9999"):
            assert quiet(ours, token, origin=origin) == 403, origin
        assert quiet(ours, token, referer="http://attacker.example/page") == 403
        assert conn.llen(K.control(MASTER)) == 0
        assert quiet(ours, token, origin="http://127.0.0.1:8321") == 303
        assert quiet(ours, token, referer="http://127.0.0.1:8321/busy") == 303
    assert conn.llen(K.control(MASTER)) == 2


def get(url: str, host: str | None = None, cookie: str = "") -> http.client.HTTPResponse:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=5)
    headers = {"Host": host or parts.netloc, **({"Cookie": cookie} if cookie else {})}
    connection.request(
        "GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers
    )
    answer = connection.getresponse()
    answer.read()
    connection.close()
    return answer


@pytest.fixture
def auto_token(redis_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    log = tmp_path / "web.log"
    popen, url = start_web(redis_url, log, env={"JOBMASTER_WEB_TOKEN": "auto"})
    yield url, log
    stop_web(popen)


def test_auto_token_is_printed_at_start_and_is_the_only_way_in(
    auto_token: tuple[str, Path],
) -> None:
    url, log = auto_token
    wait_until(lambda: "token=" in log.read_text(), timeout=10, message="the login link")
    found = re.search(r"(http://\S+/\?token=(\S+))", log.read_text())
    assert found, log.read_text()
    link, token = found.groups()
    assert len(token) >= 32
    assert get(url + "/dead").status == 303  # to the login page
    assert get(url + "/dead", host="attacker.example").status == 400
    entered = get(link)
    assert entered.status == 303 and entered.getheader("location") == "/"
    cookie = entered.getheader("set-cookie", "").split(";")[0]
    assert cookie and get(url + "/dead", cookie=cookie).status == 200


def test_readme_says_an_open_loopback_dashboard_is_open_to_local_users() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "open to every local user" in " ".join(readme.replace("*", "").split())
