"""Poison pills: the crash triage applied to jobs of a child that died."""

from __future__ import annotations

from typing import Any

from jobmaster.poison import crash_triage, interrupted
from jobmaster.slots import digest


def job(queue: str = "default", **extra: Any) -> dict[str, Any]:
    return {"jid": "j1", "queue": queue, "job": "tests.jobs.boom", "args": [], **extra}


def test_counts_crashes_then_gives_the_dead_reason_at_the_limit() -> None:
    triage = crash_triage(max_crashes=3, crash_queue="", cause="SIGKILL")
    payload = job()

    payload, reason = triage(b"", payload)
    assert reason is None
    assert payload["crash_count"] == 1
    assert payload["crash_cause"] == "SIGKILL"
    assert payload["queue"] == "default"

    payload, reason = triage(b"", payload)
    assert reason is None
    assert payload["crash_count"] == 2

    payload, reason = triage(b"", payload)
    assert reason == "the worker process died while running this job 3 times: SIGKILL"
    assert payload["crash_count"] == 3
    assert payload["queue"] == "default"


def test_the_count_survives_the_wire_as_a_string_or_null() -> None:
    triage = crash_triage(max_crashes=3, crash_queue="", cause="SIGKILL")
    _, reason = triage(b"", job(crash_count="2"))
    assert reason is not None
    payload, reason = triage(b"", job(crash_count=None))
    assert (payload["crash_count"], reason) == (1, None)


def test_each_crash_records_its_own_cause() -> None:
    payload = job()
    payload, _ = crash_triage(3, "", "SIGKILL")(b"", payload)
    payload, reason = crash_triage(3, "", "exit code 1")(b"", payload)
    assert payload["crash_cause"] == "exit code 1"
    assert reason is None
    _, reason = crash_triage(3, "", "SIGSEGV")(b"", payload)
    assert reason == "the worker process died while running this job 3 times: SIGSEGV"


def test_max_crashes_one_says_once() -> None:
    triage = crash_triage(max_crashes=1, crash_queue="", cause="exit code 1")
    payload, reason = triage(b"", job())
    assert reason == "the worker process died while running this job once: exit code 1"
    assert payload["crash_count"] == 1


def test_crash_queue_takes_the_job_at_the_limit_with_a_fresh_count() -> None:
    triage = crash_triage(max_crashes=3, crash_queue="big", cause="SIGKILL")
    payload = job()
    for count in (1, 2):
        payload, reason = triage(b"", payload)
        assert (payload["queue"], payload["crash_count"], reason) == ("default", count, None)
    payload, reason = triage(b"", payload)
    assert reason is None
    assert payload["queue"] == "big"
    assert payload["crash_count"] == 0
    assert payload["crash_cause"] == "SIGKILL"


def test_a_job_crashing_on_the_crash_queue_goes_dead_at_the_limit() -> None:
    triage = crash_triage(max_crashes=3, crash_queue="big", cause="SIGKILL")
    payload = job(queue="big", crash_count=0)
    for count in (1, 2):
        payload, reason = triage(b"", payload)
        assert (payload["queue"], payload["crash_count"], reason) == ("big", count, None)
    payload, reason = triage(b"", payload)
    assert reason == "the worker process died while running this job 3 times: SIGKILL"
    assert payload["queue"] == "big"


def test_the_whole_journey_through_the_crash_queue() -> None:
    triage = crash_triage(max_crashes=2, crash_queue="big", cause="SIGKILL")
    payload, reasons = job(), []
    for _ in range(4):
        payload, reason = triage(b"", payload)
        reasons.append((payload["queue"], reason))
    assert reasons == [
        ("default", None),
        ("big", None),
        ("big", None),
        ("big", "the worker process died while running this job 2 times: SIGKILL"),
    ]


def test_every_job_that_was_running_counts_a_run_cut_short() -> None:
    """current_job().attempt counts runs: the culprit, the suspects that ran
    beside each other, and (slots unknown) every job; not one only fetched."""
    alone = crash_triage(3, "", "SIGKILL", started=(digest(b"a"),))
    assert alone(b"a", job())[0]["interrupted_count"] == 1
    assert "interrupted_count" not in alone(b"b", job())[0]
    side_by_side = crash_triage(3, "", "SIGKILL", started=(digest(b"a"), digest(b"b")))
    payload, _ = side_by_side(b"b", job(interrupted_count=1))
    assert payload["interrupted_count"] == 2 and "crash_count" not in payload
    unknown, _ = crash_triage(3, "", "SIGKILL")(b"c", job(interrupted_count="forged"))
    assert unknown["interrupted_count"] == 1


def test_a_stop_s_push_back_counts_a_run_cut_short_only_for_jobs_that_had_started() -> None:
    triage = interrupted((digest(b"a"),))
    assert triage(b"a", job()) == ({**job(), "interrupted_count": 1}, None)
    assert triage(b"b", job()) == (job(), None)


def test_jobs_that_died_side_by_side_are_split_into_two_halves_of_suspects() -> None:
    """Halving: each half runs apart (running.py), so each further death halves
    the jobs the culprit may be among; the same halves whoever triages them."""
    raws = [f'{{"jid":"j{n}"}}'.encode() for n in range(21)]
    started = [digest(raw) for raw in raws]
    triage = crash_triage(3, "", "SIGKILL", started=started)
    groups = [triage(raw, job())[0]["crash_suspect"] for raw in raws]
    assert len(set(groups)) == 2 and all(isinstance(g, str) for g in groups)
    assert sorted(groups.count(g) for g in set(groups)) == [10, 11]  # halves
    again = crash_triage(3, "", "SIGKILL", started=list(reversed(started)))
    assert [again(raw, job())[0]["crash_suspect"] for raw in raws] == groups
    assert all("crash_count" not in triage(raw, job())[0] for raw in raws)  # none counted


def test_a_few_suspects_each_run_alone_and_a_suspect_dying_alone_is_counted() -> None:
    """A pool of threads' worth (ALONE_UP_TO) each runs alone, as before halving:
    a death costs more than running a few jobs one after another."""
    raws = [f'{{"jid":"j{n}"}}'.encode() for n in range(8)]
    started = [digest(raw) for raw in raws]
    alone = [crash_triage(3, "", "x", started=started)(raw, job())[0] for raw in raws]
    assert all(payload["crash_suspect"] is True for payload in alone)
    lone = crash_triage(3, "", "x", started=[digest(raws[0])])
    payload, _ = lone(raws[0], job(crash_suspect="d.0"))
    assert payload["crash_suspect"] is True and payload["crash_count"] == 1
