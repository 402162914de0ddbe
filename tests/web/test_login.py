"""Logging in to the dashboard (issue 16, item 9): guesses are throttled,
passwords and tokens have a minimum length, the cookie can be (and behind
HTTPS is) ``Secure``, and a logout kills the session server side.

The review: 2,000 wrong guesses in 1.1 s and the right one still worked; a
one-letter password was accepted; no ``Secure`` option; a cookie captured
before logout still worked after it, for its 12 hours.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from jobmaster.cli import main
from jobmaster.config import load_config
from jobmaster.errors import ConfigError
from jobmaster.web import create_app
from tests.web.test_app import csrf_of

pytestmark = pytest.mark.timeout(60)
PASSWORD = "a long enough password"  # noqa: S105 - a test's
TOKEN = "a-token-of-twenty-chars"  # noqa: S105 - a test's


def app_client(
    redis_url: str, base_url: str = "http://localhost", **settings: object
) -> TestClient:
    values = {"redis_url": redis_url, "web_password": PASSWORD, "web_token": TOKEN, **settings}
    return TestClient(create_app(load_config(None, values)), base_url=base_url)


@pytest.fixture
def web(redis_url: str) -> Iterator[TestClient]:
    with app_client(redis_url) as client:
        yield client


def log_in(client: TestClient, password: str) -> int:
    token = csrf_of(client.get("/login").text)
    answer = client.post(
        "/login", data={"password": password, "csrf_token": token}, follow_redirects=False
    )
    return answer.status_code


def test_wrong_guesses_are_throttled_the_right_one_too(web: TestClient) -> None:
    assert [log_in(web, f"wrong guess {n}") for n in range(5)] == [401] * 5
    refused = log_in(web, "wrong guess 6")
    assert refused == 429
    assert log_in(web, PASSWORD) == 429  # no way to keep guessing until it is right
    answer = web.get("/stats.json", headers={"authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 401  # nor through the bearer token


def test_wrong_bearer_tokens_and_links_count_as_guesses(web: TestClient) -> None:
    for n in range(5):
        wrong = web.get("/stats.json", headers={"authorization": f"Bearer nope-{n}"})
        assert wrong.status_code == 401
    assert web.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
    assert web.get("/dead", follow_redirects=False).headers["location"].startswith("/login")
    assert log_in(web, PASSWORD) == 429


def test_a_right_login_clears_the_count(web: TestClient) -> None:
    for n in range(4):
        assert log_in(web, f"wrong {n}") == 401
    assert log_in(web, PASSWORD) == 303
    assert web.get("/dead").status_code == 200


@pytest.mark.parametrize(
    ("name", "value"),
    [("web_password", "short"), ("web_password", "elevenchars"), ("web_token", "fifteen-chars!!")],
)
def test_short_secrets_are_refused(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{name}: must be .*at least"):
        load_config(None, {name: value}, env={})
    result = CliRunner().invoke(main, ["web"], env={f"JOBMASTER_{name.upper()}": value})
    assert result.exit_code == 2 and value not in result.output, result.output


def test_a_cookie_kept_from_before_a_logout_is_dead(web: TestClient) -> None:
    assert log_in(web, PASSWORD) == 303
    captured = dict(web.cookies)
    token = csrf_of(web.get("/dead").text)
    assert (
        web.post("/logout", data={"csrf_token": token}, follow_redirects=False).status_code == 303
    )
    web.cookies.clear()
    for name, value in captured.items():  # the cookie as it was before the logout
        web.cookies.set(name, value)
    answer = web.get("/dead", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/login")


@pytest.mark.parametrize(
    ("base_url", "mode", "secure"),
    [
        ("https://localhost", "auto", True),
        ("http://localhost", "auto", False),
        ("http://localhost", "true", True),
        ("https://localhost", "false", False),
    ],
)
def test_the_cookie_is_secure_behind_https_or_when_told(
    redis_url: str, base_url: str, mode: str, secure: bool
) -> None:
    with app_client(redis_url, base_url, web_cookie_secure=mode) as client:
        cookie = client.get("/login").headers["set-cookie"].lower()  # the CSRF token's session
        assert cookie.startswith("jobmaster_web=") and ("; secure" in cookie) is secure, cookie
