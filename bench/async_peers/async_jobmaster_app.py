"""jobmaster's jobs for bench/async_peers.py (``app = ["async_jobmaster_app"]``).

The decorator's defaults, as a user would write them: ``async def`` jobs
for the async columns, plain ``def`` jobs (run by the child's threads) for
the threads column, and the memory measure's long async job.
"""

from __future__ import annotations

import amarks

import jobmaster


@jobmaster.job
async def asleep(count: int) -> None:
    await amarks.asleep(count)


@jobmaster.job
async def ahttp(count: int) -> None:
    await amarks.ahttp(count)


@jobmaster.job
def sleep(count: int) -> None:
    amarks.sleep(count)


@jobmaster.job
def http_get(count: int) -> None:
    amarks.http_get(count)


@jobmaster.job
async def ahold(seconds: float) -> None:
    await amarks.ahold(seconds)


@jobmaster.job
async def apid() -> None:
    await amarks.apid()
