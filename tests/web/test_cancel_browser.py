"""The Busy page's Cancel button in headless Chromium, against a real master:
the running job stops, its row goes, its page says ``cancelled``. The
screenshot of the page with the button is docs/images/busy-cancel.png
(``JOBMASTER_SCREENSHOTS=docs/images``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import jobmaster
from jobmaster.api import ProcessSet
from jobmaster.client import Client
from tests import jobs
from tests.helpers import wait_until
from tests.process.conftest import wait_for_worker
from tests.web.browser import requires_browser
from tests.web.test_browser import expect

pytestmark = [requires_browser, pytest.mark.process, pytest.mark.timeout(120)]


def test_the_busy_page_s_cancel_button_stops_a_running_job(
    page: Any,
    dashboard_url: str,
    run_jobmaster: Callable[..., Any],
    write_config: Callable[..., Path],
    store: redis.Redis,
    redis_url: str,
    screenshots: Path,
) -> None:
    jobmaster.configure(redis_url)  # .enqueue's default client: this test's Redis
    # A beat a second: the page's busy counts catch up with the jobs quickly.
    config = write_config(processes=2, max_child_mb=512, heartbeat_ttl=3)
    master = run_jobmaster("-c", str(config))
    wait_for_worker(store, master)
    processes = ProcessSet(store)
    wait_until(lambda: len(processes.list()) == 3, timeout=30, message="master and 2 children")
    stays = jobs.stubborn.enqueue("nightly-report", 60.0)
    jid = jobs.stubborn.enqueue("export-42", 60.0)
    assert stays and jid
    client = Client(redis_url)
    wait_until(
        lambda: (
            {r.record.jid for r in processes.running()} == {stays, jid}
            and client.status(jid) == "working"
        ),
        timeout=30,
        message="both jobs running",
    )
    wait_until(lambda: sum(p.busy for p in processes.list()) == 4, timeout=10, message="beats")

    page.goto(dashboard_url + "/busy")
    row = page.locator("tr", has=page.locator(f'a[href="/jobs/{jid}"]'))
    button = row.get_by_role("button", name="Cancel")
    expect(button).to_be_visible()
    page.screenshot(path=screenshots / "busy-cancel.png", full_page=True)

    button.click()  # waits for the worker to confirm (CONFIRM_WAIT), as the CLI does
    expect(page.locator(".flash")).to_contain_text(f"{jid}: cancelled (the worker stopped it)")
    assert client.status(jid) == "cancelled"
    page.reload()
    expect(page.locator(f'a[href="/jobs/{jid}"]')).to_have_count(0)  # no longer running
    expect(page.locator(f'a[href="/jobs/{stays}"]')).to_have_count(1)  # its neighbour runs on
    page.goto(dashboard_url + f"/jobs/{jid}")
    expect(page.locator("td.status")).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
    assert store.hget("test:attempts", "export-42") == b"1"  # not retried
