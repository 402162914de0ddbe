"""A Redis password never shows: not when ``urlsplit`` misreads it, not in
``ps``, not on the public login page (issue 16, item 10).

A password holding an unencoded ``#``, ``/``, ``?`` or ``@`` made
``urlsplit`` see no password at all, so errors and banners printed the URL
whole; ``--redis-url`` put the password in every local user's ``ps``; the
login page's footer gave anyone the Redis host, port and user.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from jobmaster.cli import main
from jobmaster.config import load_config
from jobmaster.redis_target import mask_url
from jobmaster.web import create_app
from tests.helpers import free_port, wait_until
from tests.process.conftest import ROOT, jobmaster_command

pytestmark = pytest.mark.timeout(60)
LOCAL = "http://localhost"  # a Host the dashboard answers for (door.py)
HEAD, TAIL = "Qx7", "Zk4"  # the two ends of every password below


@pytest.mark.parametrize("mark", ["#", "/", "?", "@", "#/?@", ":"])
@pytest.mark.parametrize("user", ["", "app"])
def test_errors_never_show_a_password_urlsplit_misreads(mark: str, user: str) -> None:
    url = f"redis://{user}:{HEAD}{mark}{TAIL}@127.0.0.1:1/0"
    masked = mask_url(url)
    assert HEAD not in masked and TAIL not in masked, masked
    result = CliRunner().invoke(main, ["check", "--redis-url", url])
    assert result.exit_code != 0
    assert HEAD not in result.output and TAIL not in result.output, result.output


def test_a_password_in_the_query_is_masked_to_its_end() -> None:
    masked = mask_url(f"redis://h:1/0?password={HEAD}#{TAIL}&db=1")
    assert masked == "redis://h:1/0?password=***&db=1"


def test_redis_url_with_a_password_is_warned_about_and_hidden_from_ps(tmp_path: Path) -> None:
    url = f"redis://app:{HEAD}{TAIL}@127.0.0.1:1/0"  # never reached: /static needs no Redis
    log = tmp_path / "web.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [jobmaster_command(), "web", "--port", str(free_port()), "--redis-url", url],
            cwd=ROOT,
            env={**os.environ},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cmdline = Path(f"/proc/{popen.pid}/cmdline")
    try:
        wait_until(lambda: "web" in log.read_text(), timeout=20, message="jobmaster web banner")
        shown = cmdline.read_bytes().decode(errors="replace")
        assert "--redis-url" in shown and HEAD not in shown, shown
    finally:
        popen.terminate()
        popen.wait(timeout=10)
    printed = log.read_text()
    assert "warning: --redis-url holds a password" in printed, printed
    assert HEAD not in printed, printed


@pytest.fixture
def guarded(redis_url: str) -> Iterator[TestClient]:
    config = load_config(None, {"redis_url": redis_url, "web_password": "a long password"})
    with TestClient(create_app(config), base_url=LOCAL, follow_redirects=False) as client:
        yield client


def test_the_login_page_shows_nothing_of_redis(guarded: TestClient, redis_url: str) -> None:
    port = redis_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0]
    for path in ("/login", "/"):
        answer = guarded.get(path, follow_redirects=True)
        assert answer.status_code in (200, 401), path
        assert port not in answer.text and "Redis redis" not in answer.text, path
