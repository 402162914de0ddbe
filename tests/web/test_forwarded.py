"""The login throttle cannot be escaped with a forged ``X-Forwarded-For`` (issue 23, item 1).

The review: ``jobmaster web`` ran uvicorn with its default ``proxy_headers``,
which believes ``X-Forwarded-For`` from 127.0.0.1; the throttle keys on that
address, so 12 wrong guesses each with a new forged address were all 401 and
the right one at once after was let in. Now no forwarded header is believed
unless ``web_trusted_proxies`` names the proxy, and all addresses together
have a global cap of failures per minute.
"""

from __future__ import annotations

import http.client
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobmaster.config import load_config
from jobmaster.errors import ConfigError
from jobmaster.web import throttle as throttling
from tests.web.served import start_web, stop_web
from tests.web.test_app import csrf_of

pytestmark = pytest.mark.timeout(60)
PASSWORD = "a long enough password"  # noqa: S105 - a test's
TOKEN = "a-token-of-twenty-chars"  # noqa: S105 - a test's


def get(url: str, path: str, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=5)
    try:
        connection.request("GET", path, headers=headers)
        answer = connection.getresponse()
        answer.read()
        return answer.status
    finally:
        connection.close()


def log_in(url: str, password: str, forwarded: str) -> int:
    """A login from a fresh client that claims to be ``forwarded``: the status."""
    connection = http.client.HTTPConnection(urllib.parse.urlsplit(url).netloc, timeout=5)
    try:
        connection.request("GET", "/login", headers={"x-forwarded-for": forwarded})
        page = connection.getresponse()
        cookie = (page.getheader("set-cookie") or "").split(";", 1)[0]
        form = urllib.parse.urlencode(
            {"password": password, "csrf_token": csrf_of(page.read().decode())}
        )
        headers = {
            "x-forwarded-for": forwarded,
            "cookie": cookie,
            "content-type": "application/x-www-form-urlencoded",
        }
        connection.request("POST", "/login", body=form, headers=headers)
        answer = connection.getresponse()
        answer.read()
        return answer.status
    finally:
        connection.close()


@pytest.fixture
def served(redis_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    args: tuple[str, ...] = getattr(request, "param", ())
    popen, url = start_web(
        redis_url,
        tmp_path / "web.log",
        *args,
        env={"JOBMASTER_WEB_PASSWORD": PASSWORD, "JOBMASTER_WEB_TOKEN": TOKEN},
    )
    try:
        yield url
    finally:
        stop_web(popen)


def test_forged_forwarded_addresses_do_not_reset_the_throttle(served: str) -> None:
    answers = [log_in(served, f"wrong guess {n}", f"10.9.{n}.1") for n in range(12)]
    assert answers[:5] == [401] * 5 and set(answers[5:]) == {429}, answers
    assert log_in(served, PASSWORD, "10.9.99.1") == 429  # the right one too


def test_forged_addresses_do_not_reset_it_for_bearer_tokens_and_links(served: str) -> None:
    for n in range(6):
        claim = {"x-forwarded-for": f"10.6.{n}.1"}
        assert get(served, "/stats.json", {**claim, "authorization": f"Bearer no-{n}"}) == 401
    claim = {"x-forwarded-for": "10.6.99.1"}
    # Throttled: the right token is refused too, as a bearer and as a link.
    assert get(served, "/stats.json", {**claim, "authorization": f"Bearer {TOKEN}"}) == 401
    link = get(served, f"/?token={TOKEN}", claim)
    assert link != 200 and get(served, "/", claim) in (303, 307), link


@pytest.mark.parametrize(
    "served", [("--trusted-proxy", "127.0.0.1"), ("--trusted-proxy", "127.0.0.0/8")], indirect=True
)
def test_a_named_proxy_is_believed_and_the_global_cap_holds(served: str) -> None:
    """Behind a named proxy each client has its own count; a flood of addresses
    (the proxy passes on what clients claim) still meets the global cap."""
    answers = [
        log_in(served, f"wrong guess {n}", f"10.8.{n // 250}.{n % 250}")
        for n in range(throttling.GLOBAL_LIMIT + 3)
    ]
    assert answers[: throttling.GLOBAL_LIMIT] == [401] * throttling.GLOBAL_LIMIT, answers
    assert set(answers[throttling.GLOBAL_LIMIT :]) == {429}, answers
    assert log_in(served, PASSWORD, "10.7.0.1") == 429


def test_the_global_cap_ages_out() -> None:
    now = [1000.0]
    throttle = throttling.Throttle(clock=lambda: now[0])
    for n in range(throttling.GLOBAL_LIMIT):
        assert throttle.wait(f"10.0.0.{n}") == 0.0
        throttle.failed(f"10.0.0.{n}")
    assert throttle.wait("10.1.1.1") == pytest.approx(throttling.GLOBAL_WINDOW)
    now[0] += throttling.GLOBAL_WINDOW + 0.1
    assert throttle.wait("10.1.1.1") == 0.0


def test_trusted_proxies_must_be_addresses() -> None:
    config = load_config(None, {"web_trusted_proxies": ["127.0.0.1", "10.0.0.0/8", "::1"]})
    assert config.web_trusted_proxies == ["127.0.0.1", "10.0.0.0/8", "::1"]
    assert load_config(None, {}, env={}).web_trusted_proxies == []
    with pytest.raises(ConfigError, match="web_trusted_proxies"):
        load_config(None, {"web_trusted_proxies": ["proxy.example.com"]})
