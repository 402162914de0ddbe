"""Fixtures of the dashboard tests: the app on a private Redis, served for real,
and one headless Chromium for the session.

The served dashboard is the real ``jobmaster web`` command, started once per
session on the session's redis-server (each test still gets an empty
database from ``redis_url``). Screenshots go to a session temp dir, or to
``$JOBMASTER_SCREENSHOTS`` if set (how docs/*.png are made).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from jobmaster.config import load_config
from jobmaster.embedded import RedisServerProcess
from jobmaster.web import create_app
from tests.process.conftest import run_jobmaster, store, write_config
from tests.web.browser import ARGS, CHROMIUM, missing
from tests.web.served import start_web, stop_web

__all__ = ["run_jobmaster", "store", "write_config"]  # fixtures shared with tests/process

LOCAL = "http://localhost"  # a Host the dashboard answers for (door.py)


@pytest.fixture
def conn(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


@pytest.fixture
def client(redis_url: str) -> Iterator[TestClient]:
    """The dashboard in process, on this test's empty database, no password."""
    config = load_config(None, {"redis_url": redis_url})
    with TestClient(create_app(config), base_url=LOCAL, follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def dashboard_url(
    redis_server: RedisServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The real ``jobmaster web`` on the session's Redis, loopback, no password."""
    log = tmp_path_factory.mktemp("web") / "web.log"
    popen, url = start_web(redis_server.url, log)
    yield url
    stop_web(popen)


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("JOBMASTER_SCREENSHOTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    reason = missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, redis_url: str) -> Iterator[Any]:
    """A fresh browser context (no cookies) per test; ``redis_url`` empties Redis first."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    yield tab
    context.close()
