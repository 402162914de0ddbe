"""The event loop's runner (async_runner.py) with a real running table and a
stand-in for the executor and the manager: no Redis."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from jobmaster import current
from jobmaster.worker.async_runner import AsyncRunner, LoopLag
from jobmaster.worker.running import RunningTable
from jobmaster.worker.unit import Unit
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(30)

Body = Callable[[Unit], Awaitable[None]]


class Work:
    """The manager's side (AsyncWork): what became of each job."""

    def __init__(self, table: RunningTable) -> None:
        self.table = table
        self.recorded: list[Unit] = []
        self.refused: list[Unit] = []
        self.done: list[Unit] = []

    def claim(self, unit: Unit) -> bool:
        return self.table.claim(unit)

    def refuse(self, unit: Unit) -> None:
        self.refused.append(unit)

    async def arecord(self, unit: Unit, outcome: Any) -> None:
        if self.table.may_record(unit):
            self.recorded.append(unit)

    def finished(self, unit: Unit) -> None:
        self.table.finished(unit)
        self.done.append(unit)

    def bury(self, unit: Unit, reason: str) -> None:
        raise AssertionError(f"buried: {reason}")


class Jobs:
    """The executor's side: each job's body, by its jid."""

    def __init__(self, bodies: dict[str, Body]) -> None:
        self.bodies = bodies

    async def arun(self, unit: Unit) -> object:
        jid = unit.raw.split(b'"jid":"', 1)[1].split(b'"', 1)[0].decode()
        await self.bodies.get(jid, self.default)(unit)
        return object()

    @staticmethod
    async def default(_unit: Unit) -> None:
        await asyncio.sleep(0)


def unit(jid: str, suspect: bool = False) -> Unit:
    extra = ',"crash_suspect":true' if suspect else ""
    return Unit(f'{{"jid":"{jid}","job":"x"{extra}}}'.encode(), "default")


@pytest.fixture
def table() -> RunningTable:
    fetching = threading.Event()
    fetching.set()
    return RunningTable(fetching, threading.Event())


@pytest.fixture
def make_runner(table: RunningTable) -> Iterator[Callable[..., tuple[AsyncRunner, Work]]]:
    made: list[AsyncRunner] = []

    def make(bodies: dict[str, Body], capacity: int = 40) -> tuple[AsyncRunner, Work]:
        work = Work(table)
        runner = AsyncRunner(
            work,
            table,
            Jobs(bodies),  # type: ignore[arg-type]
            capacity=capacity,
            first_slot=0,
            loop_kind="asyncio",
        )
        runner.start()
        made.append(runner)
        return runner, work

    yield make
    table.close()  # jobs still waiting for their turn give up
    for runner in made:
        runner.close()


def test_jobs_waiting_behind_a_crash_suspect_leave_the_loop_its_threads(
    table: RunningTable, make_runner: Callable[..., tuple[AsyncRunner, Work]]
) -> None:
    """A crash suspect runs alone: the jobs fetched meanwhile wait for their
    turn in a thread each. They waited in the loop's default executor (32
    threads), the one ``asyncio.to_thread`` uses: 32 of them held every
    thread, and the suspect's own ``to_thread`` (its code, a sync middleware's
    hook, its outcome hook) never ran. The suspect never ended, so they never
    started: the child ran nothing until its stop."""

    async def suspect(_unit: Unit) -> None:
        await asyncio.sleep(0.3)  # the others are handed meanwhile, and wait
        await asyncio.to_thread(time.sleep, 0.01)

    runner, work = make_runner({"s": suspect})
    runner.hand([unit("s", suspect=True)])
    wait_until(table.started_digests, timeout=5, message="the suspect started")
    runner.hand([unit(f"n{n}") for n in range(35)])
    wait_until(
        lambda: len(work.recorded) == 36,
        timeout=10,
        message=f"all 36 jobs ran ({len(work.recorded)} did)",
    )


def test_loop_lag_names_the_job_whose_own_task_blocks_the_loop() -> None:
    """A job's code often runs in tasks of its own (asyncio.gather wraps each
    coroutine in one, a TaskGroup makes them): one of those blocking the loop
    was named "(not a job's task)". It inherits the job's context, which
    names the job: on 3.12+, where a task's context can be read
    (``Task.get_context``); before, the block is still noticed, unnamed."""
    stop = threading.Event()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-loop")
    thread.start()
    runner = SimpleNamespace(loop=loop, job_of=lambda _task: None)
    lag = LoopLag(runner, 0.1, stop)  # type: ignore[arg-type]
    lag.start()

    async def job() -> None:
        token = current.enter({"jid": "j1", "job": "app.jobs.parse"}, "default")
        try:
            await asyncio.gather(asyncio.sleep(0), parse())
        finally:
            current.leave(token)

    async def parse() -> None:
        time.sleep(1.0)  # CPU-bound by mistake

    try:
        future = asyncio.run_coroutine_threadsafe(job(), loop)
        wait_until(lambda: lag.blocked is not None, timeout=5, message="the block noticed")
        assert lag.blocked is not None
        named = ("app.jobs.parse", "j1")
        if sys.version_info < (3, 12):
            named = ("(not a job's task)", "?")
        assert (lag.blocked["job"], lag.blocked["jid"]) == named
        future.result(timeout=5)
    finally:
        stop.set()
        lag.join(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
