"""A Django ``TaskResult`` made from what jobmaster and the task's record keep.

jobmaster's status says where the task is (``status:<jid>``, results.py of
the package); the record (records.py) has the rest. Both are read from
Redis, anyone's to write (SPEC §8): a field of the wrong type reads as absent.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.utils import timezone

from jobmaster.contrib.django import compat


def build(
    task: compat.Task,
    jid: str,
    status: Any,
    record: Mapping[str, Any],
    errors: list[Any],
    backend: str,
) -> compat.TaskResult:
    """The TaskResult of ``task`` run as ``jid`` on the backend alias ``backend``."""
    args = record.get("args")
    kwargs = record.get("kwargs")
    workers = record.get("worker_ids")
    return compat.TaskResult(
        task=task,
        id=jid,
        status=status,
        enqueued_at=_when(record.get("enqueued_at")),
        started_at=_when(record.get("started_at")),
        finished_at=_when(record.get("finished_at")) if _ended(status) else None,
        last_attempted_at=_when(record.get("last_attempted_at")),
        args=args if isinstance(args, list) else [],
        kwargs=kwargs if isinstance(kwargs, dict) else {},
        backend=backend,
        errors=errors,
        worker_ids=[str(w) for w in workers] if isinstance(workers, list) else [],
    )


def _when(value: object) -> datetime.datetime | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        aware = datetime.datetime.fromtimestamp(value, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):  # forged
        return None
    if settings.USE_TZ:
        return aware
    naive: datetime.datetime = timezone.make_naive(aware, timezone.get_default_timezone())
    return naive


_READY = frozenset({"queued", "scheduled", "retrying"})
_FAILED = frozenset({"dead", "failed", "cancelled", "expired", "skipped"})
# What ended a task that raised nothing in our hands (its process died, a cancel).
_NO_ERROR_CAUGHT = {
    "dead": ("jobmaster.errors.PoisonPill", "the worker process died while running this task"),
    "cancelled": ("jobmaster.errors.JobCancelled", "cancelled (jobmaster.cancel)"),
    "expired": ("jobmaster.errors.JobmasterError", "not started within its expires_in"),
    "skipped": ("jobmaster.errors.JobmasterError", "its batch was cancelled"),
}


def state(status: str | None, record: Mapping[str, Any]) -> Any:
    """Django's status from jobmaster's (or, once that expired or with
    ``track_status`` off, from what the runs wrote)."""
    states = compat.TaskResultStatus
    if status == "complete":
        return states.SUCCESSFUL
    if status == "working":
        return states.RUNNING
    if status in _FAILED:
        return states.FAILED
    if status in _READY:
        return states.READY
    return _state_from_runs(record)


def _state_from_runs(record: Mapping[str, Any]) -> Any:
    states = compat.TaskResultStatus
    runs, errors = record.get("worker_ids"), record.get("errors")
    runs_count = len(runs) if isinstance(runs, list) else 0
    errors_count = len(errors) if isinstance(errors, list) else 0
    if runs_count == 0:
        return states.READY
    if not isinstance(record.get("finished_at"), int | float):
        return states.RUNNING
    return states.FAILED if errors_count >= runs_count else states.SUCCESSFUL


def _ended(status: Any) -> bool:
    return status in (compat.TaskResultStatus.SUCCESSFUL, compat.TaskResultStatus.FAILED)


def errors(record: Mapping[str, Any], django_status: Any, status: str | None) -> list[Any]:
    """Each failed run's error as its run recorded it; for a task that failed
    without raising in our hands (its process died, a cancel), what ended it."""
    kept = record.get("errors")
    found = [
        compat.TaskError(
            exception_class_path=str(e.get("exception_class_path")),
            traceback=str(e.get("traceback")),
        )
        for e in (kept if isinstance(kept, list) else [])
        if isinstance(e, dict)
    ]
    if django_status == compat.TaskResultStatus.FAILED and status in _NO_ERROR_CAUGHT:
        runs = record.get("worker_ids")
        if not found or (isinstance(runs, list) and len(runs) > len(found)):
            path, text = _NO_ERROR_CAUGHT[str(status)]
            found.append(compat.TaskError(exception_class_path=path, traceback=text))
    return found
