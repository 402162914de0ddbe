"""The running table: claims atomic with quiet/stop, suspects alone, slots kept."""

from __future__ import annotations

import threading
import time

from jobmaster.slots import StartedSlots, digest
from jobmaster.worker.running import ALONE, RunningTable, is_suspect, suspect_group
from jobmaster.worker.unit import Unit
from tests.helpers import holds_for, wait_until

PLAIN = Unit(b'{"jid":"a","job":"x"}', "default")
OTHER = Unit(b'{"jid":"b","job":"x"}', "default")
SUSPECT = Unit(b'{"jid":"s","job":"x","crash_suspect":true}', "default")


def table(slots: StartedSlots | None = None) -> RunningTable:
    fetching = threading.Event()
    fetching.set()
    return RunningTable(fetching, threading.Event(), slots)


def test_nothing_is_claimed_once_quiet_or_stopping() -> None:
    running = table()
    assert running.claim(PLAIN)
    running.quiet()
    assert not running.claim(OTHER)
    running.resume()
    assert running.claim(OTHER)
    running.close()
    assert not running.resume()  # never after a stop began
    assert not running.claim(Unit(b"{}", "default"))


def test_a_recycled_process_never_resumes_claiming() -> None:
    """Hole 2: a CONT or a remote resume set a recycling child fetching again;
    only ``stopping`` was checked."""
    running = table()
    assert running.leave()
    assert not running.claim(PLAIN)
    assert not running.resume()
    assert not running.claim(PLAIN)
    spent = RunningTable(threading.Event(), threading.Event(), max_jobs=1)
    spent.fetching.set()
    assert spent.claim(PLAIN)
    assert spent.finished(PLAIN) and spent.spent
    spent.quiet()  # the manager's quiet at max_jobs, before the recycle begins
    assert not spent.resume()  # a CONT in between does not undo it


def test_a_stop_takes_running_jobs_from_their_threads() -> None:
    running = table()
    running.claim(PLAIN)
    assert running.start(PLAIN, 0)
    assert running.close() == [PLAIN]
    running.end(PLAIN, 0)
    assert not running.may_record(PLAIN)  # pushed back: its next run records it
    assert running.finished(PLAIN)


def test_an_abandoned_job_is_not_recorded_by_its_thread_nor_counted_twice() -> None:
    running = table()
    running.claim(PLAIN)
    running.start(PLAIN, 0)
    running.abandon(PLAIN)
    assert not running.may_record(PLAIN)
    assert not running.finished(PLAIN)
    assert running.completed == 1


def test_started_jobs_are_named_in_the_slots_until_their_code_returns() -> None:
    slots = StartedSlots(2)
    running = table(slots)
    running.claim(PLAIN)
    running.claim(OTHER)  # fetched, not started: never in a slot
    running.start(PLAIN, 1)
    assert slots.started() == (digest(PLAIN.raw),)
    running.end(PLAIN, 1)
    assert slots.started() == ()


def test_a_crash_suspect_runs_alone() -> None:
    assert is_suspect(SUSPECT.raw) and not is_suspect(PLAIN.raw)
    running = table()
    for unit in (PLAIN, SUSPECT, OTHER):
        running.claim(unit)
    running.start(PLAIN, 0)
    order: list[str] = []

    def start(unit: Unit, slot: int) -> None:
        assert running.start(unit, slot)
        order.append(unit.raw.decode())

    suspect = threading.Thread(target=start, args=(SUSPECT, 1))
    suspect.start()
    wait_until(lambda: running._suspects_waiting == 1, timeout=5)
    other = threading.Thread(target=start, args=(OTHER, 2))
    other.start()  # comes after the suspect: waits for it
    holds_for(0.3, lambda: order == [], "started beside a running job")
    running.end(PLAIN, 0)
    wait_until(lambda: order == [SUSPECT.raw.decode()], timeout=5)
    holds_for(0.3, lambda: len(order) == 1, "a job started beside the suspect")
    running.end(SUSPECT, 1)
    wait_until(lambda: len(order) == 2, timeout=5)
    suspect.join(5)
    other.join(5)


def test_a_job_waiting_for_its_turn_is_not_started_once_a_stop_began() -> None:
    running = table()
    for unit in (PLAIN, SUSPECT):
        running.claim(unit)
    running.start(PLAIN, 0)
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(running.start(SUSPECT, 1)))
    waiter.start()
    time.sleep(0.05)
    running.close()
    waiter.join(5)
    assert result == [False]


def test_two_fetches_of_the_same_bytes_are_two_claims() -> None:
    """A producer that retried its LPUSH: keyed by bytes, the second claim
    overwrote the first, and the first copy's thread could not record it."""
    first, second = Unit(PLAIN.raw, "default"), Unit(PLAIN.raw, "default")
    running = table()
    assert running.claim(first) and running.claim(second)
    assert running.busy == 2
    assert running.claimed() == {PLAIN.raw: 2}
    assert running.start(first, 0) and running.start(second, 1)
    running.end(first, 0)
    assert running.may_record(first)
    assert running.finished(first)
    assert running.may_record(second)  # still its thread's to record
    assert running.claimed() == {PLAIN.raw: 1}
    running.end(second, 1)
    assert running.finished(second)
    assert running.completed == 2 and running.busy == 0


def group(name: str, jid: str) -> Unit:
    return Unit(f'{{"jid":"{jid}","job":"x","crash_suspect":"{name}"}}'.encode(), "default")


def test_suspects_of_one_half_run_side_by_side_and_apart_from_everything_else() -> None:
    """poison.py's halves: the jobs of one half start together, a job of the
    other half or an ordinary one only once they are all done."""
    assert suspect_group(group("d1.0", "a").raw) == b"d1.0"
    assert suspect_group(SUSPECT.raw) == ALONE and suspect_group(PLAIN.raw) is None
    first, second, other_half = group("d1.0", "a"), group("d1.0", "b"), group("d1.1", "c")
    running = table()
    for unit in (first, second, other_half, PLAIN):
        running.claim(unit)
    assert running.start(first, 0)
    assert running.start(second, 1, wait=False)  # its own half: beside it
    assert running.start(other_half, 2, wait=False) is None  # the other half: not yet
    assert running.start(PLAIN, 3, wait=False) is None  # nothing ordinary either
    running.end(first, 0)
    assert running.start(other_half, 2, wait=False) is None
    running.end(second, 1)
    assert running.start(other_half, 2, wait=False)
    running.end(other_half, 2)
    assert running.start(PLAIN, 3, wait=False)


def test_an_alone_suspect_never_starts_beside_one_of_a_group() -> None:
    lone, member = SUSPECT, group("d2.0", "m")
    running = table()
    for unit in (lone, member):
        running.claim(unit)
    assert running.start(member, 0)
    assert running.start(lone, 1, wait=False) is None
    running.end(member, 0)
    assert running.start(lone, 1, wait=False)
    assert running.start(group("d2.0", "n"), 2, wait=False) is None
