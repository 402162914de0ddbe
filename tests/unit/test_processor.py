"""A processor thread through its verbs alone: no manager, no Redis (processor.Work)."""

from __future__ import annotations

import threading
from typing import Any

from jobmaster.worker.outcome import Kind, Outcome
from jobmaster.worker.processor import Processor
from jobmaster.worker.running import RunningTable
from jobmaster.worker.unit import Unit

UNIT = Unit(raw=b'{"jid": "j"}', queue="default")


class FakeWork:
    def __init__(self, units: list[Unit], stopping: threading.Event) -> None:
        self.units = units
        self.stopping = stopping
        self.calls: list[tuple[str, Any]] = []

    def take(self) -> Unit | None:
        if not self.units:
            self.stopping.set()
            return None
        return self.units.pop(0)

    def record(self, unit: Unit, outcome: Outcome) -> None:
        self.calls.append(("record", outcome.kind))

    def finished(self, unit: Unit) -> None:
        self.calls.append(("finished", unit.raw))

    def bury(self, unit: Unit, reason: str) -> None:
        self.calls.append(("bury", reason))


class FakeExecutor:
    def __init__(self, table: RunningTable, error: Exception | None = None) -> None:
        self.table = table
        self.error = error
        self.started_while_running: list[tuple[bytes, ...]] = []

    def run(self, unit: Unit) -> Outcome:
        self.started_while_running.append(self.table.started_digests())
        if self.error is not None:
            raise self.error
        return Outcome(Kind.DONE, "j", "x")


def processor(error: Exception | None = None) -> tuple[Processor, FakeWork, FakeExecutor]:
    stopping = threading.Event()
    fetching = threading.Event()
    fetching.set()
    table = RunningTable(fetching, stopping)
    work = FakeWork([UNIT], stopping)
    executor = FakeExecutor(table, error)
    assert table.claim(UNIT)
    return Processor(0, work, table, executor, stopping), work, executor  # type: ignore[arg-type]


def test_a_job_runs_started_then_is_recorded_and_finished() -> None:
    thread, work, executor = processor()
    thread.run()
    assert len(executor.started_while_running[0]) == 1  # its slot named it while it ran
    assert work.calls == [("record", Kind.DONE), ("finished", UNIT.raw)]
    assert thread.table.started_digests() == ()


def test_a_bug_of_ours_buries_the_job_and_the_thread_goes_on() -> None:
    thread, work, _ = processor(RuntimeError("ours"))
    thread.run()
    assert work.calls == [("bury", "internal error: RuntimeError: ours"), ("finished", UNIT.raw)]


def test_a_job_taken_by_a_stop_before_it_starts_is_not_run() -> None:
    thread, work, executor = processor()
    thread.table.close()  # a stop pushed it back while it waited for its turn
    thread.process(UNIT)
    assert executor.started_while_running == []
    assert work.calls == [("finished", UNIT.raw)]
