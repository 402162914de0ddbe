"""Every page in the browser, with data in each, a screenshot of each; and the
actions of the pages the other browser tests do not drive (queues, periodic,
batches). ``JOBMASTER_SCREENSHOTS=docs/screenshots`` writes them for the README."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import jobmaster
from jobmaster import payload as wire
from jobmaster.api import BatchSet, Queue
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests import jobs
from tests.helpers import wait_until
from tests.process.conftest import wait_for_worker
from tests.web.browser import requires_browser
from tests.web.test_browser import bury, expect

pytestmark = [requires_browser, pytest.mark.process, pytest.mark.timeout(120)]


def failed(store: redis.Redis, job: str, args: list[object], error: str, due: float) -> None:
    """A job waiting in the retry set, as a worker would have left it."""
    payload = wire.build(job, args, {}, queue="default")
    payload |= {"error_class": error, "error_message": "upstream said 503", "retry_count": 2}
    payload["error_backtrace"] = ["Traceback (most recent call last):", f"{error}: 503"]
    store.zadd(Keys().retry, {wire.encode(payload): due})


def test_every_page_with_data(
    page: Any,
    dashboard_url: str,
    run_jobmaster: Callable[..., Any],
    write_config: Callable[..., Path],
    store: redis.Redis,
    screenshots: Path,
) -> None:
    periodic = {"nightly": {"cron": "0 3 * * *", "job": "tests.count", "args": [1]}}
    config = write_config(
        processes=2, max_child_mb=256, queues=["default", "low"], periodic=periodic
    )
    master = run_jobmaster("-c", str(config))
    wait_for_worker(store, master)
    client = Client(connection=store)
    for n in range(40):
        client.push({"job": "tests.count", "args": [n]})
    jid = client.push({"job": "tests.count", "args": [40]})
    wait_until(lambda: Queue("default", store).size() == 0, timeout=30, message="run drained")
    Queue("low", store).pause()  # its jobs stay for the queue page, until resumed
    for n in range(30):
        client.push({"job": "tests.record", "args": [f"report-{n}", 0.01], "queue": "low"})
    for n in range(3):
        client.push({"job": "tests.count", "args": [n], "at": time.time() + 600 * (n + 1)})
    failed(store, "tests.fails", ["payment-17"], "ConnectionError", time.time() + 90)
    bury(store, "tests.permanent", ["bad-input"], error="Permanent")
    batch = jobmaster.batch(description="nightly export", client=client)
    batch.add(*(jobs.record.s(f"export-{n}") for n in range(4)))

    pages = {
        "queues": "/queues",
        "queue": "/queues/low",
        "scheduled": "/scheduled",
        "retries": "/retries",
        "periodic": "/periodic",
        "batches": "/batches",
        "job": f"/jobs/{jid}",
    }
    for name, path in pages.items():
        page.goto(dashboard_url + path)
        expect(page.locator("h1")).to_be_visible()
        page.screenshot(path=screenshots / f"{name}.png")
    page.goto(dashboard_url + f"/jobs/{jid}")
    expect(page.locator("td.status")).to_have_text("complete")
    expect(page.locator("td.outcome")).to_have_text("complete")
    page.goto(dashboard_url + "/queues/low?page=2")
    expect(page.locator(".pager")).to_contain_text("page 2 of 2")
    expect(page.locator("code.args").first).to_contain_text('"report-')

    page.goto(dashboard_url + "/retries")
    expect(page.locator("main")).to_contain_text("ConnectionError")
    page.goto(dashboard_url + "/scheduled")
    expect(page.locator("tbody tr")).to_have_count(3)

    # Periodic: disable the entry, on every master.
    page.goto(dashboard_url + "/periodic")
    row = page.locator('tr[data-entry="nightly"]')
    expect(row).to_contain_text("cron 0 3 * * *")
    row.get_by_role("button", name="Disable").click()
    expect(row).to_contain_text("disabled")

    # Batches: progress, then cancel.
    page.goto(dashboard_url + "/batches")
    row = page.locator(f'tr[data-bid="{batch.bid}"]')
    expect(row).to_contain_text("nightly export")
    wait_until(lambda: _complete(store, batch.bid), timeout=30, message="batch ran")
    page.reload()
    expect(row.locator("td.state")).to_have_text("succeeded")
    pending = jobmaster.batch(description="to cancel", client=client)
    pending.add(jobs.count.options(queue="low").s(1))
    page.reload()
    page.locator(f'tr[data-bid="{pending.bid}"]').get_by_role("button", name="Cancel").click()
    expect(page.locator(f'tr[data-bid="{pending.bid}"] td.state')).to_have_text("cancelled")

    # Queues: resume the paused one, and its jobs run.
    page.goto(dashboard_url + "/queues")
    page.locator('tr[data-queue="low"]').get_by_role("button", name="Resume").click()
    expect(page.locator('tr[data-queue="low"]')).to_contain_text("active")
    reports = [f"report-{n}" for n in range(30)]
    wait_until(
        lambda: all(store.smismember("test:done", reports)), timeout=30, message="low drained"
    )
    # A graceful stop takes the children with it. Teardown's kill finds children
    # by an environment tag, which a long process title can overwrite: a child
    # it missed would fetch the next test's jobs until it noticed its master gone.
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0


def _complete(store: redis.Redis, bid: str) -> bool:
    found = BatchSet(store).get(bid)
    return found is not None and found.complete
