"""Waking idle processor threads when work arrives (see fetch.py for the design).

``WorkSignal`` is the in-process half: idle threads sleep on it without
touching Redis. ``WakeupListener`` is the Redis half: one thread per process
subscribed to the wakeup channels of its queues, turning each "N jobs
arrived" message into N wake-ups, plus a slow safety tick.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import redis

from jobmaster.outage import OUTAGE_BACKOFF, OutageLog
from jobmaster.worker.context import WorkerContext

log = logging.getLogger("jobmaster.worker.wakeup")

SAFETY_TICK = 1.0  # seconds: the longest an idle process goes without looking itself


class WorkSignal:
    """Idle threads wait here; each ``notify(n)`` lets up to n of them fetch.

    ``generation`` closes the race between a fetch that found nothing and
    the wait that follows it: a thread passes the generation it saw before
    fetching, and if a wake-up came in between it does not sleep at all.
    Permits (capped at the number of sleepers) make sure that one message
    wakes one thread, not the whole pool.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self._permits = 0
        self._waiters = 0

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def waiters(self) -> int:
        return self._waiters

    def notify(self, count: int = 1) -> None:
        with self._cond:
            self._generation += 1
            self._permits = min(self._permits + count, self._waiters)
            self._cond.notify(count)

    def notify_all(self) -> None:
        with self._cond:
            self._generation += 1
            self._permits = self._waiters
            self._cond.notify_all()

    def wait(self, seen_generation: int, keep_waiting: threading.Event, timeout: float) -> bool:
        """Sleep until notified (True) or ``timeout``/``keep_waiting`` cleared (False).

        Waits in short slices so that a thread notices quiet and stop promptly
        even if nobody notifies it.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._generation != seen_generation:
                return True
            self._waiters += 1
            try:
                while self._permits == 0 and keep_waiting.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(min(left, 0.5))
                if self._permits > 0:
                    self._permits -= 1
                    return True
                return False
            finally:
                self._waiters -= 1


class WakeupListener(threading.Thread):
    """Subscribes to the wakeup channels of this process's queues."""

    def __init__(self, ctx: WorkerContext, signal: WorkSignal, queues: list[str]) -> None:
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
