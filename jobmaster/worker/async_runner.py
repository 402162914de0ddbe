"""The event loop of a worker process, and the async jobs on it (SPEC §12).

A process whose app registers an ``async def`` job runs one event loop, on a
thread of its own, beside its job threads: up to ``async_concurrency`` async
jobs at once, each a task on that loop. Everything else is the threads' own
way, not a copy of it:

- Fetch and acknowledgement are the I/O core's (core.py), as for threads.
  The feed (fetch.py) routes each fetched job to the pool it needs and
  counts the loop's room like the threads'; it hands the loop its jobs in
  one ``call_soon_threadsafe`` a round trip. A job's FINISH goes to the
  core as a ``LoopCall``, whose reply resolves a future on this loop: the
  core never waits on the loop, and the loop runs other jobs meanwhile.
- Claims, started slots, quiet, stop and recycling are the running table's
  (running.py). A task claims its job only while the process fetches (else
  gives it back), marks its started slot (the slots after the threads') as
  its code begins, and records only a job still its own; a stop waits for
  claimed jobs, async ones included, then pushes back the rest.
- A step that may wait on Redis or on a lock (giving a job back, a crash
  suspect waiting for its turn to run alone, burying after a bug of ours)
  runs in a thread, never on the loop.
- Timeouts and cancels cancel the job's task (executor.py, coroutines.py);
  a task that swallows the cancel is given up on after ``timeout_grace``
  like a stuck thread, and the process recycled.

A job that blocks the loop (``time.sleep`` by mistake, a CPU-bound loop)
stops the other async jobs of its process, not the threads' jobs nor the
acknowledgements of async jobs that ended before it: those are the core's.
``LoopLag`` notices it within ``loop_lag_warning``, logs the job by name
and shows it in the heartbeat (``jobmaster ps``, the dashboard's Busy page).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import redis

from jobmaster import current, registry
from jobmaster import payload as wire
from jobmaster.errors import ConfigError
from jobmaster.worker.coroutines import closing
from jobmaster.worker.executor import Executor
from jobmaster.worker.outcome import Outcome
from jobmaster.worker.running import RunningTable
from jobmaster.worker.unit import Unit

log = logging.getLogger("jobmaster.worker.async_runner")

LOOP_START = 5.0  # seconds ``start`` waits for the loop to run
# The threads the loop hands blocking calls to (``asyncio.to_thread``, its
# own waits): a job's call still running there does not hold a lone
# worker's exit (cli.py), as a stuck job thread (a daemon) never did.
LOOP_THREADS = "jobmaster-loop-"


class AsyncWork(Protocol):
    """What the loop asks of its manager (manager.py)."""

    def claim(self, unit: Unit) -> bool:
        """Hold a fetched job, unless quiet or a stop began."""

    def refuse(self, unit: Unit) -> None:
        """A job claimed too late (quiet, stop): back to its queue (blocks: a thread)."""

    async def arecord(self, unit: Unit, outcome: Outcome) -> None:
        """Record the outcome if the job is still ours, and run its hook."""

    def finished(self, unit: Unit) -> None:
        """Done with the job (counted, whatever became of it)."""

    def bury(self, unit: Unit, reason: str) -> None:
        """A bug of ours hit the job: to the dead set (blocks: a thread)."""


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    """The loop ``async_loop`` names: uvloop's when installed and asked for
    (``auto``, ``uvloop``), else asyncio's."""
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ConfigError(
                    "async_loop = uvloop, but uvloop is not installed "
                    "(pip install 'jobmaster[uvloop]'), or set async_loop = auto"
                ) from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class AsyncRunner(threading.Thread):
    """One process's event loop, running its async jobs."""

    def __init__(
        self,
        work: AsyncWork,
        table: RunningTable,
        executor: Executor,
        *,
        capacity: int,
        first_slot: int,
        loop_kind: str = "auto",
    ) -> None:
        super().__init__(name="jobmaster-loop", daemon=True)
        self.work = work
        self.table = table
        self.executor = executor
        self.capacity = capacity
        self.loop_kind = loop_kind
        # Started slots of the loop's tasks, after the threads'; pop() takes
        # the lowest free one.
        self._slots = list(range(first_slot + capacity - 1, first_slot - 1, -1))
        self._tasks: dict[asyncio.Task[None], Unit] = {}  # for LoopLag's report
        self._refusing: set[asyncio.Task[None]] = set()
        self._next: deque[Unit] = deque()  # handed before a slot was back (``_begin``)
        self._ready = threading.Event()
        # Where a crash suspect, or a job behind one, waits for its turn: never
        # the default executor, which job code, middleware and hooks need
        # meanwhile (``asyncio.to_thread``). A thread per task at most.
        self._waits: ThreadPoolExecutor | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None

    # -- any thread ------------------------------------------------------------
    def start(self) -> None:
        super().start()
        if not self._ready.wait(LOOP_START) or self.error is not None:
            raise RuntimeError(f"the event loop did not start: {self.error!r}")

    def hand(self, units: list[Unit]) -> None:
        """The I/O core's thread: jobs fetched for the loop (each already in our
        in-progress list: if the loop is gone, the stop pushes them back)."""
        loop = self.loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # closed: the process is ending
            loop.call_soon_threadsafe(self._begin, units)

    @property
    def loop_name(self) -> str:
        """Which loop runs: "uvloop" or "asyncio" (for the start line)."""
        return "uvloop" if type(self.loop).__module__.startswith("uvloop") else "asyncio"

    def close(self, timeout: float = 2.0) -> None:
        """At the stop, after the push back: the tasks still running are
        cancelled (their jobs are back on their queues, not ours to record),
        then the loop ends."""
        loop = self.loop
        if loop is None or not self.is_alive():
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(timeout / 2), loop)
        self.join(timeout)

    async def _shutdown(self, wait: float) -> None:
        closing(asyncio.get_running_loop())  # what follows is no job's own cancel
        current = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=wait)
        asyncio.get_running_loop().stop()

    def job_of(self, task: object) -> Unit | None:
        """The job a task of this loop runs (read by LoopLag's thread)."""
        return self._tasks.get(task)  # type: ignore[call-overload, no-any-return]

    # -- the loop's thread -------------------------------------------------------
    def run(self) -> None:
        try:
            loop = new_loop(self.loop_kind)
        except BaseException as error:  # told to ``start``'s caller
            self.error = error
            self._ready.set()
            return
        asyncio.set_event_loop(loop)
        # ``to_thread`` steps (a sync middleware, a give-back) of many jobs at
        # once: the default pool (CPUs + 4 threads) would queue them.
        loop.set_default_executor(
            ThreadPoolExecutor(min(32, self.capacity), thread_name_prefix=LOOP_THREADS + "io")
        )
        self._waits = ThreadPoolExecutor(self.capacity, thread_name_prefix=LOOP_THREADS + "wait")
        self.loop = loop
        loop.call_soon(self._ready.set)
        try:
            loop.run_forever()
        finally:
            loop.close()
            self._waits.shutdown(wait=False)

    def _begin(self, units: list[Unit]) -> None:
        for unit in units:
            if self._slots:
                self._launch(unit, self._slots.pop())
            else:
                # Its runner is counted free once its FINISH is sent (the fetch
                # rides in that round trip: core.py), a moment before its task
                # ends and gives its slot back: it starts then.
                self._next.append(unit)

    def _launch(self, unit: Unit, slot: int) -> None:
        loop = asyncio.get_running_loop()
        if not self.work.claim(unit):  # fetched as quiet or a stop began
            self._slots.append(slot)
            refusing = loop.create_task(self._refuse(unit))
            self._refusing.add(refusing)  # a task only the loop holds may vanish
            refusing.add_done_callback(self._refusing.discard)
            return
        task = loop.create_task(self._process(unit, slot))
        self._tasks[task] = unit
        task.add_done_callback(self._tasks.pop)

    async def _refuse(self, unit: Unit) -> None:
        await asyncio.to_thread(self.work.refuse, unit)

    async def _process(self, unit: Unit, slot: int) -> None:
        """A claimed job run and recorded, if still ours: processor.py's steps."""
        try:
            started = self.table.start(unit, slot, wait=False)
            if started is None:  # a crash suspect waits for its turn: off the loop
                loop = asyncio.get_running_loop()
                started = await loop.run_in_executor(self._waits, self.table.start, unit, slot)
            if not started:
                return  # a stop began while it waited for its turn: pushed back
            try:
                outcome = await self.executor.arun(unit)
            finally:
                self.table.end(unit, slot)
            await self.work.arecord(unit, outcome)
        except Exception as error:
            log.exception("internal error processing a job; burying it")
            reason = f"internal error: {type(error).__name__}: {error}"
            with contextlib.suppress(redis.RedisError):
                await asyncio.to_thread(self.work.bury, unit, reason)
        finally:
            self.work.finished(unit)
            if self._next:
                self._launch(self._next.popleft(), slot)
            else:
                self._slots.append(slot)


class LoopLag(threading.Thread):
    """Notices a job blocking the event loop, names it in the log, and keeps it
    in ``blocked`` (the heartbeat's ``loop_blocked``) until the loop runs again.

    Every ``warning / 4`` seconds (at most 0.1) it queues a beat on the loop;
    a beat not run ``warning`` seconds after it was queued means something
    holds the loop: the task running then (``asyncio.current_task`` of that
    loop) is the culprit. One line when it is noticed, one when the loop is
    free again, whatever the block's length.
    """

    def __init__(self, runner: AsyncRunner, warning: float, stop: threading.Event) -> None:
        super().__init__(name="jobmaster-loop-lag", daemon=True)
        self.runner = runner
        self.warning = warning
        self.stop_event = stop
        self.blocked: dict[str, Any] | None = None  # jid, job, since: for the heartbeat
        self._sent: float | None = None  # monotonic time of the beat in flight
        self._lock = threading.Lock()

    def run(self) -> None:
        period = min(0.1, self.warning / 4)
        while not self.stop_event.wait(period):
            loop = self.runner.loop
            if loop is None or loop.is_closed():
                continue
            with self._lock:
                sent = self._sent
                if sent is None:
                    self._sent = time.monotonic()
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(self._beat)
                    continue
                lag = time.monotonic() - sent
                if lag < self.warning or self.blocked is not None:
                    continue
                self.blocked = self._culprit(loop, lag)
            log.warning(
                "event loop blocked for %.1fs by job %s (jid=%s): its other async jobs "
                "wait; a blocking call in an async job belongs in asyncio.to_thread",
                lag,
                self.blocked["job"],
                self.blocked["jid"],
                extra={"jid": self.blocked["jid"], "job": self.blocked["job"]},
            )

    def _culprit(self, loop: asyncio.AbstractEventLoop, lag: float) -> dict[str, Any]:
        task = asyncio.current_task(loop)
        unit = self.runner.job_of(task) if task is not None else None
        payload: Mapping[str, Any] = (unit.payload or {}) if unit is not None else {}
        if unit is None and task is not None:
            payload = _job_in_context(task)
        return {
            "jid": str(payload.get("jid", "?")),
            "job": str(payload.get("job", "(not a job's task)")),
            "since": time.time() - lag,
        }

    def _beat(self) -> None:
        with self._lock:
            sent, blocked = self._sent, self.blocked
            self._sent, self.blocked = None, None
        if blocked is not None and sent is not None:
            log.warning(
                "event loop free again after %.1fs (blocked by job %s, jid=%s)",
                time.monotonic() - sent,
                blocked["job"],
                blocked["jid"],
                extra={"jid": blocked["jid"], "job": blocked["job"]},
            )


def _job_in_context(task: asyncio.Task[Any]) -> Mapping[str, Any]:
    """The payload of the job a task of its own belongs to (one that
    ``asyncio.gather`` or a TaskGroup made for its code inherits the job's
    context: ``current_job()``); empty if none, or before Python 3.12, whose
    tasks do not show their context."""
    context = getattr(task, "get_context", None)
    running = context().get(current._current) if context is not None else None
    return running.payload if running is not None else {}


THREADS, LOOP = 0, 1  # the feed's pools (fetch.Pool), in the manager's order


def pool_of(unit: Unit) -> int:
    """The feed's router (fetch.Feed): LOOP for an async job, else THREADS.

    The entry is decoded here, once (fetched.py reads it from the unit). One
    that is no job at all, or names no job registered here, goes to a thread,
    which buries it as always."""
    try:
        payload = wire.decode(unit.raw)
    except wire.BadPayload:
        return THREADS
    unit.payload = payload
    job = registry.lookup(payload.get("job"))
    return LOOP if job is not None and job.is_async else THREADS
