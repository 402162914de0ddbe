"""Dramatiq's jobs for bench/peers.py: ``dramatiq dramatiq_app`` imports this.

The broker is Dramatiq's documented ``RedisBroker`` on ``BENCH_REDIS_URL``
(the bench's private server), with its default middleware; the actors use
the default queue and options.
"""

from __future__ import annotations

import os

import dramatiq
import marks
from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor
def noop() -> None:
    marks.noop()


@dramatiq.actor
def hold(token: str, seconds: float) -> None:
    marks.hold(token, seconds)
