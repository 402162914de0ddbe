"""What a reaped child's death means: crash or not, whose jobs to blame.

Decided in the loop's pass that reaps it, from what the master knows
without Redis (its wait status, whether it was asked to go, which jobs its
threads had started); the requeue itself is the Redis thread's
(``DeadChild``, duties.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from jobmaster import exitcodes
from jobmaster.config import Config
from jobmaster.poison import crash_triage
from jobmaster.supervisor import exits
from jobmaster.supervisor.children import Child
from jobmaster.supervisor.duties import DeadChild

log = logging.getLogger("jobmaster.supervisor.deaths")


@dataclass(frozen=True)
class Death:
    dead: DeadChild  # for the Redis thread: its list, and how to blame its jobs
    crashed: bool  # died unasked, not with exit 0
    unexpected: bool  # not asked to go: replaced (with backoff if right after start)
    # Replaced with the crash-loop backoff: died unasked, or killed over the
    # container's memory (memory kills back off like crashes: never a kill loop).
    backoff: bool
    restart: str | None  # the reason label of jobmaster_child_restarts_total; None: a stop
    app_failed: bool  # the app failed to import: the master halts instead of fork-looping


def judge(
    child: Child, status: int, started: Sequence[bytes] | None, config: Config, now: float
) -> Death:
    """Judged, and logged: an unexpected death is an ERROR with its decoded
    status. ``started``: the jobs its threads were running as it died
    (slots.py); the rest it had only fetched, and are requeued as they were."""
    unexpected = not child.expected_exit
    # A child that left on its own with exit 0 (a remote stop of that one
    # child) pushed its jobs back itself: replaced, but not a crash.
    crashed = unexpected and exits.exit_code(status) != exitcodes.OK
    triage = None
    if crashed:
        cause = exits.cause(status)
        triage = crash_triage(config.max_crashes, config.crash_queue, cause, "died", started)
    elif child.memory_cause is not None and os.WIFSIGNALED(status):
        # Killed by us after its grace: what it still ran bloated it.
        memory, event = child.memory_cause, child.memory_event
        triage = crash_triage(config.max_crashes, config.crash_queue, memory, event, started)
    restart = "crash" if crashed else "exit" if unexpected else child.restart_reason
    name, how = f"child {child.index} (pid {child.pid})", exits.describe(status)
    # Its list is requeued by the Redis thread, which logs the count.
    if crashed:
        log.error("%s died: %s; requeueing its jobs", name, how)
    elif unexpected:
        log.warning("%s exited on its own (%s); replacing it", name, how)
    else:
        log.info("%s stopped (%s): %s", name, child.stop_reason, how)
    return Death(
        DeadChild(child.identity, name, triage, crashed, now),
        crashed,
        unexpected,
        unexpected or child.killed_by_memory,
        restart or None,
        crashed and exits.exit_code(status) == exitcodes.APP_LOAD_FAILED,
    )
