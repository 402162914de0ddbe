"""The real ``jobmaster web`` command as a subprocess, for the browser tests."""

from __future__ import annotations

import http.client
import os
import subprocess
import urllib.parse
from pathlib import Path

from tests.helpers import free_port, wait_until
from tests.process.conftest import ROOT, jobmaster_command


def status_of(url: str) -> int | None:
    """The HTTP status of a GET, redirects not followed; None if nobody answers."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=2)
    try:
        connection.request("GET", parts.path or "/")
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


def start_web(
    redis_url: str, log: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``jobmaster web`` on a free port; returns the process and its loopback URL."""
    port = free_port()
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [jobmaster_command(), "web", "--redis-url", redis_url, "--port", str(port), *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert popen.poll() is None, f"jobmaster web exited:\n{log.read_text()}"
        return status_of(url + "/static/app.css") == 200

    wait_until(up, timeout=20, interval=0.1, message="jobmaster web answering")
    return popen, url


def stop_web(popen: subprocess.Popen[bytes]) -> None:
    popen.terminate()
    try:
        popen.wait(timeout=10)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=10)
