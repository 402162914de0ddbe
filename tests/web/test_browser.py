"""End to end in headless Chromium: the real ``jobmaster web`` and, where the
test says so, a real ``jobmaster`` master, on a private Redis.

Waits are Playwright's ``expect`` (it polls the page until a deadline) and
``wait_until`` on Redis: never a sleep. Each test saves screenshots of what
it saw (the ``screenshots`` fixture says where).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from jobmaster import payload as wire
from jobmaster.api import DeadSet, ProcessSet, Queue, Stats
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import wait_for_worker
from tests.web.browser import requires_browser

pytestmark = [requires_browser, pytest.mark.process, pytest.mark.timeout(120)]

XSS = "<script>document.title='pwned'</script><img src=x onerror=\"alert('pwned')\">"


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def bury(store: redis.Redis, job: str, args: list[object], error: str = "ValueError") -> str:
    """A job in the dead set, as a worker would have left it."""
    payload = wire.build(job, args, {}, queue="default")
    payload |= {"error_class": error, "error_message": f"{error} on purpose", "retry_count": 3}
    payload["error_backtrace"] = ["Traceback (most recent call last):", f"{error}: on purpose"]
    store.zadd(Keys().dead, {wire.encode(payload): time.time() - 120})
    return str(payload["jid"])


def test_overview_shows_the_counts_of_a_run(
    page: Any,
    dashboard_url: str,
    run_jobmaster: Callable[..., Any],
    write_config: Callable[..., Path],
    store: redis.Redis,
    screenshots: Path,
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=1)))
    wait_for_worker(store, master)
    client = Client(connection=store)
    for n in range(6):
        client.push({"job": "tests.count", "args": [n]})
    client.push({"job": "tests.permanent", "args": ["never"]})
    wait_until(lambda: Stats(store).processed == 7, timeout=30, message="7 jobs processed")
    page.goto(dashboard_url + "/")
    expect(page.locator("#processed")).to_have_text("7")
    expect(page.locator("#failed")).to_have_text("1")
    expect(page.locator("[data-stat=processed_today]")).to_have_text("7")
    # The master sampled the totals when it started: this minute's bar shows the run.
    expect(page.locator("#throughput title").first).to_contain_text("7 processed, 1 failed")
    expect(page.locator("[data-live-state]")).to_contain_text("live, updated")  # JS polled
    page.screenshot(path=screenshots / "overview.png")


def test_retrying_a_dead_job_from_the_dead_page_runs_it(
    page: Any,
    dashboard_url: str,
    run_jobmaster: Callable[..., Any],
    write_config: Callable[..., Path],
    store: redis.Redis,
    screenshots: Path,
) -> None:
    jid = bury(store, "tests.record", ["revived"])
    bury(store, "tests.record", ["stays-dead"])
    master = run_jobmaster("-c", str(write_config(processes=1)))
    wait_for_worker(store, master)
    page.goto(dashboard_url + "/dead")
    row = page.locator(f'tr[data-jid="{jid}"]')
    expect(row).to_contain_text("tests.record")
    expect(row).to_contain_text('"revived"')
    row.locator("details summary").click()  # error, backtrace, payload
    expect(row.locator("pre.backtrace")).to_contain_text("ValueError: on purpose")
    page.screenshot(path=screenshots / "dead.png")
    row.get_by_role("button", name="Retry").click()
    expect(page.locator(".flash")).to_have_text(f"retried {jid}")
    wait_until(
        lambda: store.sismember("test:done", "revived"), timeout=30, message="revived job ran"
    )
    assert not store.sismember("test:done", "stays-dead")
    assert DeadSet(store).size() == 1


def test_the_quiet_button_quiets_a_real_master(
    page: Any,
    dashboard_url: str,
    run_jobmaster: Callable[..., Any],
    write_config: Callable[..., Path],
    store: redis.Redis,
    screenshots: Path,
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2, max_child_mb=512)))
    identity = wait_for_worker(store, master)
    processes = ProcessSet(store)
    wait_until(lambda: len(processes.list()) == 3, timeout=30, message="master and 2 children")
    client = Client(connection=store)
    client.push({"job": "tests.record", "args": ["slow", 30.0]})  # shown as running
    wait_until(processes.running, timeout=30, message="a running job")
    page.goto(dashboard_url + "/busy")
    row = page.locator(f'tr[data-identity="{identity}"]')
    expect(row.locator("td.state")).to_have_text("running")
    expect(page.locator("svg.bar")).to_have_count(2)  # a memory bar per child
    expect(page.get_by_text("tests.record")).to_be_visible()
    page.screenshot(path=screenshots / "busy.png")
    row.get_by_role("button", name="Quiet").click()
    expect(page.locator(".flash")).to_have_text(f"quiet: sent to {identity}")
    wait_until(lambda: all(p.quiet for p in processes.list()), timeout=15, message="master quiet")
    client.push({"job": "tests.record", "args": ["after-quiet"]})
    page.reload()
    expect(row.locator("td.state")).to_have_text("quiet")
    assert Queue("default", store).size() == 1  # a quiet master fetches nothing new


def test_a_script_argument_is_shown_as_text(
    page: Any, dashboard_url: str, store: redis.Redis, screenshots: Path
) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    # A queue no worker serves: a worker left running by an earlier test of the
    # session (same Redis) must not take the job before the page shows it.
    Client(connection=store).push({"job": "tests.count", "args": [XSS], "queue": "unserved"})
    jid = bury(store, "tests.count", [XSS], error="ValueError")
    page.goto(dashboard_url + "/queues/unserved")
    expect(page.locator("code.args").first).to_contain_text("<script>document.title='pwned'")
    page.goto(dashboard_url + f"/jobs/{jid}")
    expect(page.locator("main")).to_contain_text("<img src=x onerror=")
    page.goto(dashboard_url + "/dead")
    expect(page.locator("code.args").first).to_contain_text("<script>")
    page.screenshot(path=screenshots / "escaped.png")
    assert page.title() != "pwned"
    assert dialogs == []
    assert page.locator("main script, main img").count() == 0  # no element was made


def test_a_post_without_the_csrf_token_is_refused(
    page: Any, dashboard_url: str, store: redis.Redis
) -> None:
    Queue("default", store).pause()
    page.goto(dashboard_url + "/queues")
    status = page.evaluate(
        """async (url) => (await fetch(url, {method: "POST",
             headers: {"content-type": "application/x-www-form-urlencoded"},
             body: "op=resume"})).status""",
        dashboard_url + "/queues/default/action",
    )
    assert status == 403
    # The page's own form, its token taken out: the browser's POST is refused too.
    page.evaluate("document.querySelectorAll('input[name=csrf_token]').forEach(e => e.remove())")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.locator('tr[data-queue="default"]').get_by_role("button", name="Resume").click()
    assert posted.value.status == 403
    expect(page.locator("body")).to_contain_text("CSRF")
    assert Queue("default", store).is_paused()


def test_login_with_a_password(redis_url: str, browser: Any, tmp_path: Path) -> None:
    from tests.web.served import start_web, stop_web

    env = {"JOBMASTER_WEB_PASSWORD": "correct horse battery"}
    popen, url = start_web(redis_url, tmp_path / "web.log", env=env)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(url + "/dead")
        expect(page).to_have_url(url + "/login?next=%2Fdead")
        page.get_by_label("Password").fill("wrong")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("alert")).to_have_text("Wrong password.")
        page.get_by_label("Password").fill("correct horse battery")
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(url + "/dead")
        expect(page.locator("h1")).to_contain_text("Dead")
    finally:
        context.close()
        stop_web(popen)
