"""Jobs that report what ``jobmaster.current_job()`` says inside them.

Each run appends its JobInfo (as JSON) to ``test:current:<marker>`` on the
server named by JOBMASTER_REDIS_URL, so a test can read what a run in
another process saw.
"""

from __future__ import annotations

import dataclasses
import json

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


def seen(marker: str) -> list[dict[str, object] | None]:
    """What each run of ``current(marker)`` saw, in order."""
    return [json.loads(raw) for raw in store().lrange(f"test:current:{marker}", 0, -1)]
