"""The live masters and worker processes, and remote quiet / resume / stop.

Read from the heartbeats: a master writes ``heartbeat:<identity>`` (role
master, its children's identities) every 5 s and registers in
``keys.masters``; every worker process (a master's child, or a lone
``jobmaster worker``) writes its own (busy, quiet, completed, memory_mb,
and master_pid/index for a child) and registers in ``keys.processes``. A
heartbeat expires after ``heartbeat_ttl``: no heartbeat, not alive.

Commands go to ``control:<identity>``, the list a master reads every
quarter second (its Redis thread, supervisor/duties.py) and a worker
process at each of its heartbeats; both accept ``quiet``, ``resume`` and
``stop``. A master forwards quiet and resume to its children (as TSTP /
CONT) and stops them with itself, so the ``*_all`` variants tell masters
and lone workers only. ``stop`` sent to one
child makes it stop gracefully; its master then forks a replacement.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field

from jobmaster.api.base import Backend, Connection, as_bytes, texts
from jobmaster.api.records import JobRecord
from jobmaster.connection import byte_list
from jobmaster.tolerant import answers, number, text

COMMANDS = ("quiet", "resume", "stop")
CONTROL_TTL = 60  # seconds a command waits for a process that never reads it


@dataclass(frozen=True)
class Process:
    identity: str
    role: str  # "master", "child" (of a master) or "worker" (alone)
    hostname: str
    pid: int
    index: int | None  # a child's slot, 1..processes
    master: str | None  # a child's master's identity, if that master is alive
    queues: list[str]
    concurrency: int
    busy: int  # a master: its children's sum
    quiet: bool
    memory_mb: float | None  # a worker process's, by its memory_metric
    completed: int | None  # jobs a worker process finished since it started
    started_at: float
    beat_at: float  # last heartbeat (unix time)
    children: list[str] = field(default_factory=list)  # a master's
    info: dict[str, str] = field(default_factory=dict)  # the heartbeat as written

    @classmethod
    def from_heartbeat(cls, identity: str, info: dict[str, str]) -> Process:
        def integer(name: str) -> int | None:
            return int(number(info[name])) if name in info else None

        role = "master" if info.get("role") == "master" else "child"
        if role == "child" and "master_pid" not in info:
            role = "worker"
        return cls(
            identity=identity,
            role=role,
            hostname=info.get("hostname", identity.split(":", 1)[0]),
            pid=integer("pid") or 0,
            index=integer("index") if role == "child" else None,
            master=None,
            queues=[q for q in info.get("queues", "").split(",") if q],
            concurrency=integer("concurrency") or 0,
            busy=integer("busy") or 0,
            quiet=info.get("quiet", "0") not in ("0", ""),
            memory_mb=number(info["memory_mb"]) if "memory_mb" in info else None,
            completed=integer("completed"),
            started_at=number(info.get("started_at")),
            beat_at=number(info.get("beat_at")),
            children=[c for c in info.get("children", "").split(",") if c],
            info=info,
        )

    @property
    def max_child_mb(self) -> float:
        """A master's memory limit per child (0: none, or an older master that
        does not say); a child's is its master's."""
        return number(self.info.get("max_child_mb"))

    @property
    def memory_limit_mb(self) -> float:
        """A master's container (cgroup) memory limit; 0: none known."""
        return number(self.info.get("memory_limit_mb"))

    @property
    def memory_used_mb(self) -> float:
        """What the master's cgroup uses (less inactive page cache), at its last sample."""
        return number(self.info.get("memory_used_mb"))


@dataclass(frozen=True)
class RunningJob:
    """A job in a live worker process's in-progress list: running, or about to."""

    identity: str  # the worker process that fetched it
    record: JobRecord
    # Seconds since it was fetched, read from its "working" status's remaining
    # TTL (MARK sets it, see worker/acks.py); None without status tracking.
    runtime: float | None


class ProcessSet:
    def __init__(self, connection: Connection = None, *, namespace: str | None = None) -> None:
        self.backend = Backend.resolve(connection, namespace)

    def list(self) -> list[Process]:
        """Every live process: each master followed by its children, then lone
        workers (and children whose master is gone), two round trips in all."""
        redis, keys = self.backend.redis, self.backend.keys
        pipe = redis.pipeline(transaction=False)
        pipe.smembers(keys.masters)
        pipe.smembers(keys.processes)
        masters, workers = answers(pipe, set(), set())
        identities = texts(set(masters) | set(workers))
        pipe = redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hgetall(keys.heartbeat(identity))
        beats = answers(pipe, *([{}] * len(identities)))
        found = [
            Process.from_heartbeat(identity, {text(k): text(v) for k, v in beat.items()})
            for identity, beat in zip(identities, beats, strict=True)
            if beat
        ]
        return _grouped(found)

    def __iter__(self) -> Iterator[Process]:
        return iter(self.list())

    def size(self) -> int:
        return len(self.list())

    def get(self, identity: str) -> Process | None:
        return next((p for p in self.list() if p.identity == identity), None)

    def prune(self) -> int:
        """Forget processes whose heartbeat expired; returns how many.

        A worker whose in-progress list still holds jobs stays registered:
        orphan recovery finds lists through ``keys.processes`` and must
        requeue those jobs first.
        """
        redis, keys = self.backend.redis, self.backend.keys
        pipe = redis.pipeline(transaction=False)
        pipe.smembers(keys.masters)
        pipe.smembers(keys.processes)
        masters, workers = (texts(m) for m in answers(pipe, set(), set()))
        pipe = redis.pipeline(transaction=False)
        for identity in masters:
            pipe.exists(keys.heartbeat(identity))
        for identity in workers:
            pipe.exists(keys.heartbeat(identity))
            pipe.llen(keys.inprogress(identity))
        replies = pipe.execute()
        stale_masters = [m for m, up in zip(masters, replies, strict=False) if not up]
        rest = replies[len(masters) :]
        stale_workers = [
            w for i, w in enumerate(workers) if not rest[2 * i] and not rest[2 * i + 1]
        ]
        pipe = redis.pipeline(transaction=False)
        if stale_masters:
            pipe.srem(keys.masters, *stale_masters)
        if stale_workers:
            pipe.srem(keys.processes, *stale_workers)
        return sum(int(n) for n in pipe.execute())

    # builtins.list: inside this class, ``list`` is the method above.
    def running(self, processes: builtins.list[Process] | None = None) -> builtins.list[RunningJob]:
        """The jobs the live worker processes hold now, longest running first;
        two round trips. ``processes``: a ``list()`` already read, to reuse."""
        redis, keys = self.backend.redis, self.backend.keys
        workers = [p.identity for p in processes or self.list() if p.role != "master"]
        pipe = redis.pipeline(transaction=False)
        for identity in workers:
            pipe.lrange(keys.inprogress(identity), 0, -1)
        held = [
            (identity, JobRecord.parse(as_bytes(raw)))
            for identity, reply in zip(workers, answers(pipe, *([[]] * len(workers))), strict=True)
            for raw in byte_list(reply)
        ]
        pipe = redis.pipeline(transaction=False)
        for _, record in held:
            pipe.get(keys.status(record.jid or "-"))
            pipe.pttl(keys.status(record.jid or "-"))
        replies = pipe.execute()
        found = []
        for n, (identity, record) in enumerate(held):
            status, pttl = replies[2 * n], replies[2 * n + 1]
            runtime = None
            # A mark kept alive past its status_ttl (worker/acks.py) tells no start.
            ttl = self.backend.status_ttl
            if ttl and status is not None and text(status) == "working" and int(pttl) <= ttl * 1000:
                runtime = max(0.0, ttl - int(pttl) / 1000)
            found.append(RunningJob(identity, record, runtime))
        return sorted(found, key=lambda job: -(job.runtime or 0.0))

    # -- remote control ------------------------------------------------------
    def send(self, identity: str, command: str) -> bool:
        """Push ``command`` to one live process's control list; False if it has
        no heartbeat (gone, or never was)."""
        if command not in COMMANDS:
            raise ValueError(f"unknown command {command!r}: use one of {', '.join(COMMANDS)}")
        redis, keys = self.backend.redis, self.backend.keys
        if not redis.exists(keys.heartbeat(identity)):
            return False
        pipe = redis.pipeline(transaction=True)
        pipe.rpush(keys.control(identity), command)
        pipe.expire(keys.control(identity), CONTROL_TTL)
        pipe.execute()
        return True

    def send_all(self, command: str) -> int:
        """Tell every master and lone worker (a master passes it on to its
        children); returns how many were told."""
        targets = [p for p in self.list() if p.role in ("master", "worker")]
        return sum(self.send(p.identity, command) for p in targets)

    def quiet(self, identity: str) -> bool:
        """Stop fetching new jobs (running ones finish)."""
        return self.send(identity, "quiet")

    def resume(self, identity: str) -> bool:
        return self.send(identity, "resume")

    def stop(self, identity: str) -> bool:
        """Graceful stop, as on TERM: running jobs get shutdown_timeout."""
        return self.send(identity, "stop")

    def quiet_all(self) -> int:
        return self.send_all("quiet")

    def resume_all(self) -> int:
        return self.send_all("resume")

    def stop_all(self) -> int:
        return self.send_all("stop")


def _grouped(found: list[Process]) -> list[Process]:
    """Masters (by host and pid), each followed by its children (by index), with
    each child's ``master`` and each master's ``busy`` filled in; then the rest."""
    by_identity = {p.identity: p for p in found}
    ordered: list[Process] = []
    placed: set[str] = set()
    for master in sorted((p for p in found if p.role == "master"), key=_host_pid):
        kids = [by_identity[c] for c in master.children if c in by_identity]
        kids = sorted(kids, key=lambda p: (p.index or 0, p.pid))
        kids = [dataclasses.replace(kid, master=master.identity) for kid in kids]
        ordered.append(dataclasses.replace(master, busy=sum(kid.busy for kid in kids)))
        ordered += kids
        placed |= {master.identity, *(kid.identity for kid in kids)}
    ordered += sorted((p for p in found if p.identity not in placed), key=_host_pid)
    return ordered


def _host_pid(process: Process) -> tuple[str, int]:
    return process.hostname, process.pid
