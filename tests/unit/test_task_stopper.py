"""Stopping an async job's task (worker/coroutines.py): only while the job's
own code runs, its request taken back once read, and a cancel of the task
from outside (the loop closing at a stop) told apart from the job's."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time

import pytest

from jobmaster import current
from jobmaster.worker.coroutines import TaskStopper, closing, run_coroutine

pytestmark = pytest.mark.timeout(30)


def test_an_interrupt_from_another_thread_cancels_the_running_job() -> None:
    async def job() -> str:
        stopper = TaskStopper()
        threading.Thread(target=stopper.interrupt, args=(TimeoutError,)).start()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            assert stopper.stopped() and stopper.stopped()  # read twice: taken back once
            task = asyncio.current_task()
            assert task is not None
            if sys.version_info >= (3, 11):
                assert task.cancelling() == 0  # the request was ours, and is handled
            return "stopped"
        return "ran on"

    assert asyncio.run(job()) == "stopped"


def test_an_interrupt_after_the_job_returned_cancels_nothing() -> None:
    async def job() -> str:
        stopper = TaskStopper()
        stopper.done()  # its code returned: what follows is its recording
        stopper.interrupt(TimeoutError)
        await asyncio.sleep(0.05)  # the loop runs the late cancel: a no-op
        return "recorded"

    assert asyncio.run(job()) == "recorded"


@pytest.mark.parametrize("marked", [False, True], ids=["as-is", "loop-marked-closing"])
def test_a_cancel_of_the_task_itself_is_told_apart(marked: bool) -> None:
    """3.11+ tells it by ``Task.cancelling()``; 3.10 only by the loop the stop
    marks closing first (async_runner.py), as a stop does."""

    async def main() -> bool:
        seen: list[bool] = []
        if marked:
            closing(asyncio.get_running_loop())

        async def job() -> None:
            stopper = TaskStopper()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                seen.append(stopper.cancelled_from_outside())
                raise

        task = asyncio.create_task(job())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return seen[0]

    assert asyncio.run(main()) is (marked or sys.version_info >= (3, 11))


def test_run_coroutine_from_inside_a_running_loop_uses_a_loop_of_its_own() -> None:
    async def value() -> int:
        return 7

    async def caller() -> int:
        return run_coroutine(value())  # a sync call from a coroutine

    assert run_coroutine(value()) == 7
    assert asyncio.run(caller()) == 7


def test_a_job_is_blamed_for_running_on_only_once_it_had_its_cancel_or_holds_the_loop() -> None:
    """Past its timeout's grace (watchdog.py): not while another job holds the
    loop (its cancel waits), but once it holds the loop itself, or swallowed
    its cancel ``grace`` seconds ago."""
    seen: dict[str, bool] = {}

    def look(name: str, stopper: TaskStopper, grace: float, after: float = 0.0) -> None:
        """From another thread (the watchdog's), ``after`` seconds from now."""

        def run() -> None:
            time.sleep(after)
            seen[name] = stopper.blamed(grace)

        thread = threading.Thread(target=run)
        thread.start()
        if not after:
            thread.join()  # the caller holds the loop meanwhile

    async def main() -> None:
        stoppers: list[TaskStopper] = []
        ending = asyncio.Event()

        async def job() -> None:
            stopper = TaskStopper()
            stoppers.append(stopper)
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:  # swallowed: a bad job
                look("holds the loop", stopper, 60.0)
            await ending.wait()

        task = asyncio.create_task(job())
        await asyncio.sleep(0.05)
        [stopper] = stoppers
        stopper.interrupt(TimeoutError)
        TaskStopper()  # main() is a job too, and holds the loop: the cancel waits
        look("behind another", stopper, 0.0)
        look("swallowed", stopper, 0.0, after=0.1)  # the loop free, its cancel landed
        look("within grace", stopper, 60.0, after=0.1)
        await asyncio.sleep(0.3)
        ending.set()
        await task

    asyncio.run(main())
    assert seen == {
        "behind another": False,
        "holds the loop": True,
        "swallowed": True,
        "within grace": False,
    }


def test_a_cancel_of_a_closing_loop_s_task_is_told_apart_on_every_python() -> None:
    """The worker's loop closing at a stop (async_runner.py) cancels every task:
    no job's own cancel. Python 3.10 has no Task.cancelling(): there it was read
    as the job's error, and each job pushed back logged a failure (and told its
    middleware so) as it was requeued."""

    async def main() -> list[bool]:
        seen: list[bool] = []

        async def job() -> None:
            stopper = TaskStopper()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                seen.append(stopper.cancelled_from_outside())
                raise

        task = asyncio.create_task(job())
        await asyncio.sleep(0.01)
        closing(asyncio.get_running_loop())
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return seen

    assert asyncio.run(main()) == [True]


def test_a_job_whose_own_task_holds_the_loop_is_blamed() -> None:
    """asyncio.gather runs a job's coroutines in tasks of their own: one of
    them blocking the loop is the job's doing (on any Python: before 3.12 a
    task no job is known to own is taken for the job's)."""
    seen: list[bool] = []

    async def main() -> None:
        stopper = TaskStopper()
        token = current.enter({"jid": "j1", "job": "app.jobs.parse"}, "default")

        async def parse() -> None:
            thread = threading.Thread(target=lambda: seen.append(stopper.blamed(60.0)))
            thread.start()
            thread.join()  # holds the loop meanwhile

        try:
            await asyncio.gather(parse())
        finally:
            current.leave(token)

    asyncio.run(main())
    assert seen == [True]
