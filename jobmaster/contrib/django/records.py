"""What Django's ``TaskResult`` needs beyond jobmaster's own status: one hash per task.

jobmaster keeps a job's status, attempts and return value (results.py); a
Django ``TaskResult`` also wants the arguments, the time it was enqueued,
each attempt's worker and each error's class path and traceback. Those live
in ``<prefix>django:<jid>`` (a hash, JSON values):

- written at enqueue (the backend): ``task`` (the task's module path),
  ``backend``, ``queue``, ``args``, ``kwargs``, ``enqueued_at``;
- written by each run (the worker): ``worker_ids`` (one per attempt),
  ``started_at`` (the first), ``last_attempted_at``, ``finished_at``,
  ``errors`` (``[{"exception_class_path", "traceback"}]``).

The two sides write different fields, so neither order of the two can
lose the other's. The status itself is jobmaster's (``status:<jid>``).
Its TTL: ``RESULT_TTL`` (seconds; the backend's OPTIONS, a week by default)
after the last write, and through the wait of a task deferred with
``run_after``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import redis

from jobmaster.keys import Keys

DEFAULT_TTL = 7 * 24 * 3600
MAX_ERRORS = 20  # a job retried a hundred times keeps its last errors only
MAX_TRACEBACK = 20_000  # characters of each traceback kept


def key(keys: Keys, jid: str) -> str:
    return f"{keys.prefix}django:{jid}"


def read(client: redis.Redis, keys: Keys, jid: str) -> dict[str, Any] | None:
    """The record's fields, each decoded (one that is not JSON reads as None)."""
    raw: dict[bytes, bytes] = client.hgetall(key(keys, jid))  # type: ignore[assignment]
    if not raw:
        return None
    record: dict[str, Any] = {}
    for name, value in raw.items():
        field = name.decode(errors="replace")
        try:
            record[field] = json.loads(value)
        except (ValueError, UnicodeDecodeError):  # forged or truncated: read as absent
            record[field] = None
    return record


def started(client: redis.Redis, keys: Keys, jid: str, worker_id: str, ttl: float) -> list[str]:
    """Note an attempt's start; the worker ids so far, this one last."""
    record = read(client, keys, jid) or {}
    workers = [str(w) for w in _list(record.get("worker_ids"))] + [worker_id]
    now = time.time()
    fields = {"worker_ids": workers, "last_attempted_at": now}
    if not isinstance(record.get("started_at"), int | float):
        fields["started_at"] = now
    write(client, keys, jid, fields, ttl)
    return workers


def finished(
    client: redis.Redis,
    keys: Keys,
    jid: str,
    ttl: float,
    error: tuple[str, str] | None = None,
) -> None:
    """Note an attempt's end; ``error``: its exception's class path and traceback."""
    fields: dict[str, Any] = {"finished_at": time.time()}
    if error is not None:
        record = read(client, keys, jid) or {}
        errors = _list(record.get("errors"))
        path, traceback = error
        errors.append({"exception_class_path": path, "traceback": traceback[-MAX_TRACEBACK:]})
        fields["errors"] = errors[-MAX_ERRORS:]
    write(client, keys, jid, fields, ttl)


def write(client: redis.Redis, keys: Keys, jid: str, fields: Mapping[str, Any], ttl: float) -> None:
    name = key(keys, jid)
    pipe = client.pipeline(transaction=True)
    pipe.hset(name, mapping={field: json.dumps(value) for field, value in fields.items()})
    pipe.expire(name, max(1, round(ttl)))
    pipe.execute()


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else []
