"""Celery's jobs for bench/peers.py: ``celery -A celery_app worker`` loads this.

The Redis broker on ``BENCH_REDIS_URL`` (the bench's private server), no
result backend, Celery's default task options (early acknowledgement).
``broker_connection_retry_on_startup`` only silences the deprecation
warning Celery 5 prints without it; it is what Celery does anyway.
"""

from __future__ import annotations

import os

import marks
from celery import Celery

app = Celery("celery_app", broker=os.environ["BENCH_REDIS_URL"])
app.conf.broker_connection_retry_on_startup = True


@app.task
def noop() -> None:
    marks.noop()


@app.task
def hold(token: str, seconds: float) -> None:
    marks.hold(token, seconds)
