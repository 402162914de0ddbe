"""Poison pills: a job that keeps killing the worker process it runs in.

Each job requeued from a child that died carries ``crash_count``; at
``max_crashes`` it goes to the dead set with the reason instead of killing
children forever. With ``crash_queue`` set it is moved to that queue first
(served, say, by big-memory workers), and dies only if it crashes there too.
"""

from __future__ import annotations

from typing import Any

from jobmaster.recovery import Triage


def crash_triage(max_crashes: int, crash_queue: str, cause: str, event: str = "died") -> Triage:
    """A triage for ``Recovery.requeue`` of a worker process that ``event`` of ``cause``.

    ``event`` is "died", or "was recycled over its memory limit" for a child
    stopped by the memory killer while the job still ran: a job that bloats
    its worker every time ends in the dead set too, instead of cycling.
    """

    def triage(payload: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
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
