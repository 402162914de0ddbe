"""Waking an idle process when work arrives (see fetch.py for the design).

``WakeupListener`` is one thread per process subscribed to the wakeup
channels of its queues, turning each "N jobs arrived" message into a look
by the process's I/O core (``CoreWakeups``), plus a slow safety tick.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Protocol

import redis

from jobmaster.outage import OUTAGE_BACKOFF, OutageLog
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.core import IOCore

log = logging.getLogger("jobmaster.worker.wakeup")

SAFETY_TICK = 1.0  # seconds: the longest an idle process goes without looking itself


class Wakeups(Protocol):
    """What the listener wakes: the I/O core of its process (``CoreWakeups``)."""

    def notify(self, count: int = 1) -> None: ...

    def notify_all(self) -> None: ...

    @property
    def waiters(self) -> int:
        """Whether anyone waits for a look (the safety tick wakes only then)."""


class CoreWakeups:
    """The I/O core (core.py) as the listener and the manager see it: each
    message, resume or tick makes it look for jobs; it fetches as many as its
    runners are free for, so the count a message carries needs no counting."""

    def __init__(self, core: IOCore) -> None:
        self.core = core

    def notify(self, count: int = 1) -> None:
        self.core.wake()

    def notify_all(self) -> None:
        self.core.wake()

    @property
    def waiters(self) -> int:
        return int(self.core.hungry)


class WakeupListener(threading.Thread):
    """Subscribes to the wakeup channels of this process's queues."""

    def __init__(self, ctx: WorkerContext, signal: Wakeups, queues: list[str]) -> None:
        super().__init__(name="jobmaster-wakeup", daemon=True)
        self.ctx = ctx
        self.signal = signal
        self.channels = [ctx.keys.wakeup_channel(queue) for queue in queues]
        # Set once subscribed: a push before that would only be seen at the
        # next safety tick, so the process reports "started" after it.
        self.subscribed = threading.Event()

    def run(self) -> None:
        outage = OutageLog("wakeup listener")
        while not self.ctx.stopping.is_set():
            pubsub = self.ctx.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(*self.channels)
                pubsub.get_message(timeout=1.0)  # the confirmation: we are listening now
                self.subscribed.set()
                outage.succeeded(time.monotonic())
                # Messages sent while we were not subscribed are gone: look once now.
                self.signal.notify_all()
                self._listen(pubsub)
            except redis.RedisError as error:
                if self.ctx.stopping.is_set():
                    return  # Redis going away after our stop is expected, not news
                outage.failed(error, time.monotonic())
                self.ctx.stopping.wait(OUTAGE_BACKOFF)
            except Exception:
                log.exception("wakeup listener: unexpected error; resubscribing")
                self.ctx.stopping.wait(OUTAGE_BACKOFF)
            finally:
                with contextlib.suppress(redis.RedisError):
                    pubsub.close()

    def _listen(self, pubsub: redis.client.PubSub) -> None:
        last_tick = time.monotonic()
        while not self.ctx.stopping.is_set():
            message = pubsub.get_message(timeout=SAFETY_TICK)
            if message is not None:
                try:
                    count = int(message["data"])
                except (TypeError, ValueError):
                    count = 1
                self.signal.notify(max(1, count))
            now = time.monotonic()
            if now - last_tick >= SAFETY_TICK:
                last_tick = now
                # A producer that LPUSHes without publishing (another language,
                # an old client) is still served within a second: one idle
                # thread looks for itself.
                if self.signal.waiters:
                    self.signal.notify(1)
