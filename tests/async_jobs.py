"""Async jobs for the tests of SPEC 12: each records what it did in the test's
Redis (``test:`` keys, outside the jobmaster namespace), through the sync
client in a thread so the event loop never waits on it."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import jobmaster
from jobmaster.middleware import JobContext, Middleware
from tests.jobs import store


@jobmaster.job(name="tests.async.nap")
async def nap(marker: str, seconds: float = 0.5) -> str:
    """Awaits ``seconds`` and records its marker (start and end, its pid)."""
    client = store()
    await asyncio.to_thread(client.rpush, "test:async:started", marker)
    await asyncio.sleep(seconds)
    await asyncio.to_thread(client.rpush, "test:async:done", f"{marker}:{os.getpid()}")
    return marker


@jobmaster.job(name="tests.async.sync_nap")
def sync_nap(marker: str, seconds: float = 0.1) -> str:
    """A thread job beside the async ones: which thread ran it, and when."""
    client = store()
    client.rpush("test:sync:started", marker)
    time.sleep(seconds)
    client.rpush("test:sync:done", f"{marker}:{threading.current_thread().name}")
    return marker


@jobmaster.job(name="tests.async.forever", timeout=1)
async def forever(marker: str) -> None:
    """Runs until cancelled: its timeout (1 s) or jobmaster.cancel."""
    client = store()
    await asyncio.to_thread(client.rpush, "test:async:started", marker)
    try:
        await asyncio.sleep(3600)
    finally:
        await asyncio.to_thread(client.rpush, "test:async:stopped", marker)


@jobmaster.job(name="tests.async.stubborn", timeout=1)
async def stubborn(marker: str) -> None:
    """Swallows the cancel of its timeout and goes on (a bad job)."""
    client = store()
    await asyncio.to_thread(client.rpush, "test:async:started", marker)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            await asyncio.to_thread(client.rpush, "test:async:swallowed", marker)


@jobmaster.job(name="tests.async.blocker")
async def blocker(marker: str, seconds: float = 2.0) -> None:
    """Blocks its event loop (a time.sleep by mistake)."""
    await asyncio.to_thread(store().rpush, "test:async:started", marker)
    time.sleep(seconds)
    await asyncio.to_thread(store().rpush, "test:async:done", f"{marker}:{os.getpid()}")


@jobmaster.job(name="tests.async.crash", retry=0)
async def crash(marker: str) -> None:
    """A poison pill: kills its process outright."""
    await asyncio.to_thread(store().rpush, "test:async:started", marker)
    await asyncio.sleep(0.2)
    os._exit(99)


@jobmaster.job(name="tests.async.fail", retry=1, backoff=0.1)
async def fail(marker: str) -> None:
    await asyncio.to_thread(store().rpush, "test:async:started", marker)
    raise ValueError(f"{marker} failed")


@jobmaster.job(name="tests.async.who")
async def who(marker: str) -> dict[str, object]:
    """What current_job() says inside an async job."""
    info = jobmaster.current_job()
    assert info is not None
    await asyncio.sleep(0)
    return {"jid": info.jid, "name": info.name, "attempt": info.attempt, "marker": marker}


class SyncMarks(Middleware):
    """A plain (sync) middleware: it must work around async jobs too."""

    def before_process(self, job: JobContext) -> None:
        store().rpush("test:middleware", f"before:{job.payload['args'][0]}")

    def after_process(self, job: JobContext, error: BaseException | None) -> None:
        outcome = "ok" if error is None else type(error).__name__
        store().rpush("test:middleware", f"after:{job.payload['args'][0]}:{outcome}")


@jobmaster.job(name="tests.async.threaded_wait")
async def threaded_wait(marker: str, seconds: float = 30.0) -> None:
    """Waits in a thread of the loop's (``asyncio.to_thread``), as the README
    advises for a blocking call: a call that outlives the process's stop."""
    await asyncio.to_thread(store().rpush, "test:async:started", marker)
    await asyncio.to_thread(time.sleep, seconds)
