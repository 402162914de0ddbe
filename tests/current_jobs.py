"""Jobs that report what ``jobmaster.current_job()`` says inside them.

Each run appends its JobInfo (as JSON) to ``test:current:<marker>`` on the
server named by JOBMASTER_REDIS_URL, so a test can read what a run in
another process saw.
"""

from __future__ import annotations

import dataclasses
import json
import time

import jobmaster
from tests.jobs import store


@jobmaster.job(name="tests.current", retry=1, backoff=0)
def current(marker: str, fail_first: bool = False) -> None:
    """Reports its JobInfo; with ``fail_first``, its first attempt then raises."""
    info = jobmaster.current_job()
    seen = dataclasses.asdict(info) if info is not None else None
    store().rpush(f"test:current:{marker}", json.dumps(seen))
    if fail_first and info is not None and info.attempt == 1:
        raise RuntimeError("the first attempt fails on purpose")


@jobmaster.job(name="tests.current_then_sleeps")
def current_then_sleeps(marker: str, seconds: float) -> None:
    """Reports its JobInfo; its first run then sleeps ``seconds`` (long enough
    to be killed or pushed back), the others end at once."""
    info = jobmaster.current_job()
    store().rpush(f"test:current:{marker}", json.dumps(dataclasses.asdict(info) if info else None))
    if info is not None and info.attempt == 1:
        time.sleep(seconds)


def seen(marker: str) -> list[dict[str, object] | None]:
    """What each run of ``current(marker)`` saw, in order."""
    return [json.loads(raw) for raw in store().lrange(f"test:current:{marker}", 0, -1)]
