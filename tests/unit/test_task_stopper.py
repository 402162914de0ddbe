"""Stopping an async job's task (worker/coroutines.py): only while the job's
own code runs, its request taken back once read, and a cancel of the task
from outside (the loop closing at a stop) told apart from the job's."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from jobmaster.worker.coroutines import TaskStopper, run_coroutine

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


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling() is 3.11+")
def test_a_cancel_of_the_task_itself_is_told_apart() -> None:
    async def main() -> bool:
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
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return seen[0]

    assert asyncio.run(main()) is True


def test_run_coroutine_from_inside_a_running_loop_uses_a_loop_of_its_own() -> None:
    async def value() -> int:
        return 7

    async def caller() -> int:
        return run_coroutine(value())  # a sync call from a coroutine

    assert run_coroutine(value()) == 7
    assert asyncio.run(caller()) == 7
