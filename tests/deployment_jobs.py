"""Jobs for the Redis deployment tests (TLS, Sentinel), beside tests/jobs.py."""

from __future__ import annotations

import jobmaster
from tests import jobs


@jobmaster.job(name="tests.enqueue_record")
def enqueue_record(marker: str) -> None:
    """Enqueues ``tests.record`` from inside the worker, through the default client:
    the one the worker's own settings (TLS, Sentinel) configured."""
    jobs.record.enqueue(f"{marker}-child")
