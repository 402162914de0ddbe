"""Poison pills: a job that keeps killing the worker process it runs in.

Each job requeued from a child that died carries ``crash_count``; at
``max_crashes`` it goes to the dead set with the reason instead of killing
children forever. With ``crash_queue`` set it is moved to that queue first
(served, say, by big-memory workers), and dies only if it crashes there too.

Blame is exact (SPEC §8). The master knows which entries of the dead child's
list had started (slots.py):

- a job fetched but not started did nothing: requeued as it was;
- a job that ran alone when its child died is the culprit: counted;
- jobs that ran side by side share the suspicion, and none is counted: each
  is requeued as a ``crash_suspect``. Up to ALONE_UP_TO of them (a pool of
  threads), each runs alone (``true``: running.py) until it ends, so a
  second death names the culprit. More (a child running 100 async jobs),
  each joins one half of them (its value names the half: this death and 0
  or 1) and runs only beside its own half: each further death halves the
  jobs the culprit may be among, down to running alone. One at a time, 100
  suspects would run one by one after every such death; halving costs a
  few more deaths instead (log2(100 / 8), about 4).

Where nothing says which jobs had started (``started`` is None), every entry
is counted, as before the slots existed.

Every job that was running, counted or not, also carries one more run cut
short (``interrupted_count``): ``current_job().attempt`` counts runs, and
so does a stop's push-back of a job that had started (``interrupted``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from jobmaster.current import INTERRUPTED
from jobmaster.recovery import Triage
from jobmaster.slots import digest

SUSPECT = "crash_suspect"
# Suspects of one death up to this many each run alone; more are halved.
ALONE_UP_TO = 8


def crash_triage(
    max_crashes: int,
    crash_queue: str,
    cause: str,
    event: str = "died",
    started: Sequence[bytes] | None = None,
) -> Triage:
    """A triage for ``Recovery.requeue`` of a worker process that ``event`` of ``cause``.

    ``event`` is "died", or "was recycled over its memory limit" for a child
    stopped by the memory killer while the job still ran: a job that bloats
    its worker every time ends in the dead set too, instead of cycling.
    ``started``: digests (slots.digest) of the entries whose code was running.
    """

    def triage(raw: bytes, payload: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        if started is not None:
            if digest(raw) not in started:
                return payload, None  # not started: not to blame
            _cut_short(payload)
            if len(started) > 1:  # ran beside others: beside its half only next time
                payload[SUSPECT] = _half(started, digest(raw))
                return payload, None
            if SUSPECT in payload:
                payload[SUSPECT] = True  # counted: alone from now on
        if started is None:
            _cut_short(payload)
        count = _count(payload.get("crash_count")) + 1
        payload["crash_count"] = count
        payload["crash_cause"] = cause
        if count < max_crashes:
            return payload, None
        if crash_queue and payload.get("queue") != crash_queue:
            payload["queue"] = crash_queue
            payload["crash_count"] = 0  # a fresh set of tries where it has room to run
            return payload, None
        times = "once" if count == 1 else f"{count} times"
        return payload, f"the worker process {event} while running this job {times}: {cause}"

    return triage


def _half(started: Sequence[bytes], mine: bytes) -> str | bool:
    """The suspect group of the job ``mine`` among the jobs that ran side by
    side when a child died: this death's name and which half it is in (the
    same for every job triaged for that death, whichever master triages it);
    ``True`` (alone) for a half of one."""
    if len(started) <= ALONE_UP_TO:
        return True
    ordered = sorted(started)
    middle = (len(ordered) + 1) // 2
    lower = ordered.index(mine) < middle
    if (middle if lower else len(ordered) - middle) == 1:
        return True
    death = hashlib.blake2b(b"".join(ordered), digest_size=6).hexdigest()
    return f"{death}.{0 if lower else 1}"


def interrupted(started: Sequence[bytes]) -> Triage:
    """A triage for a stop's push-back: each job whose code was running
    (``started``: digests, slots.digest) carries one more run cut short. No
    blame: a stop is not the job's doing."""

    def triage(raw: bytes, payload: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        if digest(raw) in started:
            _cut_short(payload)
        return payload, None

    return triage


def _cut_short(payload: dict[str, Any]) -> None:
    payload[INTERRUPTED] = _count(payload.get(INTERRUPTED)) + 1


def _count(value: object) -> int:
    """The crashes a payload says it caused. It came through Redis, so it may be
    anything: what is not a number counts as none, rather than raising in the
    master's loop (which would take the master, and every child, down)."""
    if not isinstance(value, int | float | str):
        return 0
    try:
        return int(value or 0)
    except (ValueError, OverflowError):
        return 0
