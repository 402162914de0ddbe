"""Batches as an operator sees them: list, look up, cancel.

Reads the hashes BATCH_ADD and FINISH_STEP write (keys.batch); see
jobmaster/workflows/batch.py for what the counters mean. ``failed`` is the
number of the batch's jobs that failed and have not succeeded since (its
failed set), ``pending`` the jobs neither succeeded nor skipped.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from jobmaster.api.base import Backend, Connection
from jobmaster.scripts import BatchCancel
from jobmaster.tolerant import moment, number, text


@dataclass(frozen=True)
class BatchInfo:
    bid: str
    description: str
    total: int
    pending: int
    succeeded: int
    failed: int
    dead: int
    skipped: int
    cancelled: bool
    created_at: float
    complete: bool  # every job ran at least once or was skipped: on_complete fired
    success: bool  # every job succeeded: on_success fired
    complete_at: float | None = None
    success_at: float | None = None

    @property
    def progress(self) -> float:
        """The share of the batch's jobs that are done with (succeeded or skipped)."""
        return (self.succeeded + self.skipped) / self.total if self.total else 1.0

    @property
    def state(self) -> str:
        """success, complete, cancelled or running, in that order."""
        if self.success:
            return "success"
        if self.complete:
            return "complete"
        return "cancelled" if self.cancelled else "running"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "progress": round(self.progress, 4), "state": self.state}


Infos = list[BatchInfo]
Ids = list[str]
Found = list[BatchInfo | None]  # module level: BatchSet.list shadows the builtin in the class

FIELDS = (
    "description",
    "total",
    "pending",
    "succeeded",
    "skipped",
    "dead",
    "cancelled",
    "created_at",
    "complete_at",
    "success_at",
)


class BatchSet:
    def __init__(self, connection: Connection = None, *, namespace: str | None = None) -> None:
        self.backend = Backend.resolve(connection, namespace)

    def list(self) -> Infos:
        """Every batch kept, newest first; ids whose batch expired are pruned."""
        backend = self.backend
        ids = [text(b) for b in backend.redis.zrevrange(backend.keys.batches, 0, -1)]
        found = self._read(ids)
        gone = [bid for bid, info in zip(ids, found, strict=True) if info is None]
        if gone:
            backend.redis.zrem(backend.keys.batches, *gone)
        return [info for info in found if info is not None]

    def get(self, bid: str) -> BatchInfo | None:
        return self._read([bid])[0]

    def size(self) -> int:
        return int(self.backend.redis.zcard(self.backend.keys.batches))

    def cancel(self, bid: str) -> bool:
        """Mark the batch cancelled: its jobs not yet started are skipped (counted,
        not run) when a worker fetches them. False if there is no such batch."""
        keys = self.backend.keys
        now = repr(time.time())
        call = BatchCancel(batch_key=keys.batch(bid), now=now)
        return bool(call.run(self.backend.scripts.batch_cancel))

    def _read(self, ids: Ids) -> Found:
        keys = self.backend.keys
        pipe = self.backend.redis.pipeline(transaction=False)
        for bid in ids:
            pipe.hmget(keys.batch(bid), FIELDS)
            pipe.scard(keys.batch_failed(bid))
        replies = pipe.execute()
        found: Found = []
        for index, bid in enumerate(ids):
            values, failed = replies[2 * index], replies[2 * index + 1]
            found.append(_info(bid, dict(zip(FIELDS, values, strict=True)), int(failed)))
        return found


def _info(bid: str, raw: dict[str, Any], failed: int) -> BatchInfo | None:
    if raw["created_at"] is None:
        return None

    def count(name: str) -> int:
        return int(number(raw[name]))

    def at(name: str) -> float | None:
        return moment(raw[name])

    return BatchInfo(
        bid=bid,
        description=text(raw["description"] or ""),
        total=count("total"),
        pending=count("pending"),
        succeeded=count("succeeded"),
        failed=failed,
        dead=count("dead"),
        skipped=count("skipped"),
        cancelled=raw["cancelled"] is not None,
        created_at=moment(raw["created_at"]) or 0.0,
        complete=raw["complete_at"] is not None,
        success=raw["success_at"] is not None,
        complete_at=at("complete_at"),
        success_at=at("success_at"),
    )
