"""The dashboard with its Redis gone: a page that says so, status 503, one log
line per request and no traceback (it was a bare 500 and a traceback), and the
pages back by themselves once Redis is."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from jobmaster.embedded import RedisServerProcess
from tests.web.served import start_web, status_of, stop_web

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]


def fetch(url: str) -> tuple[int, str, str]:
    """Status, content type and body of a GET (an error status is an answer too)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - our own http URL
            return answer.status, answer.headers["content-type"], answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["content-type"], error.read().decode()


def test_redis_unreachable_is_a_503_page_and_one_log_line(
    private_redis: RedisServerProcess, tmp_path: Path
) -> None:
    log = tmp_path / "web.log"
    popen, url = start_web(private_redis.url, log)
    try:
        assert fetch(url + "/")[0] == 200
        private_redis.stop()
        status, kind, body = fetch(url + "/")
        assert status == 503 and kind.startswith("text/html")
        assert "<h1>Redis is unreachable</h1>" in body
        status, kind, body = fetch(url + "/stats.json")  # the live refresh
        assert status == 503 and json.loads(body) == {"error": "Redis is unreachable"}
        text = log.read_text()
        assert "Traceback" not in text
        lines = [line for line in text.splitlines() if "Redis unreachable" in line]
        assert len(lines) == 2, text  # one per request
        assert "answered 503 to GET /stats.json" in lines[1]
        private_redis.start()
        assert status_of(url + "/") == 200
    finally:
        stop_web(popen)
