"""``jobmaster web``: --help answers; any address but loopback needs a password."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jobmaster.commands.web import is_loopback
from tests.helpers import free_port
from tests.process.conftest import ROOT, jobmaster_command
from tests.web.served import start_web, status_of, stop_web

pytestmark = pytest.mark.timeout(60)


def web(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [jobmaster_command(), "web", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_help_answers() -> None:
    result = web("--help")
    assert result.returncode == 0
    for flag in ("-c, --config", "--redis-url", "--host", "--port"):
        assert flag in result.stdout


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "dashboard.example"])  # noqa: S104
def test_non_loopback_without_password_refuses_to_start(redis_url: str, host: str) -> None:
    env = {"JOBMASTER_WEB_PASSWORD": "", "JOBMASTER_WEB_TOKEN": ""}
    port = str(free_port())
    result = web("--redis-url", redis_url, "--host", host, "--port", port, env=env)
    assert result.returncode == 2
    assert "without a password" in result.stderr
    assert "web_password" in result.stderr
    assert result.stderr.count("\n") == 1  # one line, no traceback
    assert status_of(f"http://127.0.0.1:{port}/") is None  # nothing was bound


def test_loopback_names() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "example.com"]))  # noqa: S104


def test_a_password_lets_it_listen_beyond_loopback(redis_url: str, tmp_path: Path) -> None:
    """Bound on every interface with a password: it starts, and asks to log in."""
    env = {"JOBMASTER_WEB_PASSWORD": "open sesame, please"}
    # Every interface, on purpose (with a password, for a few seconds).
    popen, url = start_web(redis_url, tmp_path / "web.log", "--host", "0.0.0.0", env=env)  # noqa: S104
    try:
        assert status_of(url + "/") == 303  # the overview sends to the login page
        assert status_of(url + "/login") == 200
        assert "open sesame, please" not in (tmp_path / "web.log").read_text()
    finally:
        stop_web(popen)
