"""Running a coroutine to its end from code that is not on an event loop.

``jobmaster.testing`` runs jobs in the caller's thread (``drain``, ``work``,
``inline``): an async job there is run on an event loop of its own. The
caller may itself be a coroutine (an async test calling ``drain()``), whose
thread already runs a loop: ``asyncio.run`` refuses that thread, so the
coroutine runs on a new loop in a thread of its own, and the caller waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from jobmaster.current import _current as _running_job

T = TypeVar("T")


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine``'s result (or its exception), whatever this thread runs."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(coroutine)
        except BaseException as error:  # handed to the caller, whatever it is
            box["error"] = error

    # In the caller's context (a new thread's is empty): ``current_job()`` set
    # around the call (testing.drain) is the job's, as in a worker.
    context = contextvars.copy_context()
    thread = threading.Thread(
        target=context.run, args=(run,), name="jobmaster-coroutine", daemon=True
    )
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


# Loops whose tasks are being cancelled because their process stops
# (async_runner.py): on Python 3.10, which has no ``Task.cancelling()``, the
# only way to tell that cancel from a job's own ``CancelledError``.
_closing: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def closing(loop: asyncio.AbstractEventLoop) -> None:
    """Its tasks are about to be cancelled from outside: the process stops."""
    _closing.add(loop)


# The task of each async job running on a loop of this process, to its stopper:
# which job holds a loop (``TaskStopper.blamed``).
_jobs: weakref.WeakKeyDictionary[asyncio.Task[Any], TaskStopper] = weakref.WeakKeyDictionary()


class TaskStopper:
    """Stops the running async job's task from any thread (its timeout, a
    cancel), for as long as the job's own code runs and no longer.

    Made inside the job's task. ``interrupt`` may be called by the watchdog
    or the cancel watch at any moment; the cancel itself happens on the
    loop's thread, and only if the job's coroutine has not returned by then
    (``done``): a cancel landing later would cut short the recording of the
    outcome instead. A stop that lands is taken back from the task once seen
    (``uncancel``), so the task records the outcome undisturbed.
    """

    __slots__ = ("_active", "_cancelled", "_landed", "_taken_back", "loop", "task")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self._active = True
        self._cancelled = False
        self._landed: float | None = None  # monotonic time the cancel reached the task
        self._taken_back = False
        if self.task is not None:
            _jobs[self.task] = self

    def interrupt(self, _kind: type[BaseException]) -> None:
        """Any thread: stop the job (the kind is read back from its scope)."""
        with contextlib.suppress(RuntimeError):  # a closed loop: the process is ending
            self.loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._active and self.task is not None:
            self._cancelled = True
            self._landed = time.monotonic()
            self.task.cancel()

    def blamed(self, grace: float) -> bool:
        """Any thread (the watchdog's, past the job's timeout and ``grace``):
        whether the job itself keeps running. Its cancel runs on the loop: a
        job that holds the loop (its task, or a task its code made) is to
        blame; one whose cancel waits behind another job holding the loop is
        not (yet); one that had its cancel ``grace`` seconds ago and goes on,
        is. A task whose job cannot be told (before Python 3.12, a task a job
        made) is taken for this job's: given up on, as a stuck job is."""
        current = asyncio.current_task(self.loop)
        if current is None:  # the loop is free: the cancel has its turn
            landed = self._landed
            return landed is not None and time.monotonic() - landed >= grace
        if current is self.task:
            return True
        other = _jobs.get(current)
        if other is not None:
            return False  # another job's task holds the loop
        theirs = getattr(current, "get_context", None)  # Python 3.12+
        mine = getattr(self.task, "get_context", None)
        if theirs is None or mine is None:
            return True
        job = theirs().get(_running_job)
        return job is None or job is mine().get(_running_job)

    def done(self) -> None:
        """The loop's thread: the job's coroutine has returned (or raised)."""
        self._active = False

    def stopped(self) -> bool:
        """Whether this stopper cancelled the task (its request is taken back)."""
        if self._cancelled and not self._taken_back:
            self._taken_back = True
            if self.task is not None and hasattr(self.task, "uncancel"):
                self.task.uncancel()  # 3.11+: the request was ours, and is handled
        return self._cancelled

    def cancelled_from_outside(self) -> bool:
        """The task itself was cancelled, not by this stopper: the worker is
        ending (its loop closing) and the job's outcome is not its to record.
        (Python 3.10 has no ``cancelling()``: there, its loop is ``closing``.)"""
        if self._cancelled or self.task is None:
            return False
        if not hasattr(self.task, "cancelling"):
            return self.loop in _closing
        return bool(self.task.cancelling())
