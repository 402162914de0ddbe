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
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from jobmaster.api.base import Backend, Connection, as_bytes
from jobmaster.api.records import JobRecord
from jobmaster.connection import byte_list
from jobmaster.tolerant import answers, number, text

COMMANDS = ("quiet", "resume", "stop")
CONTROL_TTL = 60  # seconds a command waits for a process that never reads it

# A view reads the masters and processes sets in pages (SSCAN), never whole
# (SPEC §8): 100,000 forged members made ``jobmaster ps`` and the Busy page
# read them all with SMEMBERS and then a heartbeat each. A view lists at
# most LISTED live processes and reads at most EXAMINED members of each set;
# what it passed over is counted and told (``Listing.notes``). A member that
# is not an identity costs no round trip at all. The orphan scan drops
# members without a heartbeat or list once their grace has passed
# (orphans.py), so a flood of the processes set cleans itself away.
PAGE = 500  # SSCAN's COUNT: members per round trip (a hint Redis keeps roughly)
LISTED = 1000
EXAMINED = 3000
RUNNING_READ = 100  # entries of one in-progress list a view reads
BLOCKED_FIELD = 2048  # the longest loop_blocked field read (a worker writes ~100 bytes)
SHOWN = 200  # characters of a forged field shown
# What identity.py writes: host:pid:nonce (no braces, no blanks), short.
IDENTITY = re.compile(r"[^\s{}:]{1,255}:[0-9]{1,10}:[^\s{}:]{1,64}")


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
    def async_concurrency(self) -> int:
        """A worker process's room for async jobs beside its threads (0: it runs
        no event loop: its app has no async job, or it is older)."""
        return int(number(self.info.get("async_concurrency")))

    @property
    def loop_blocked(self) -> dict[str, Any] | None:
        """The job blocking this process's event loop now (``jid``, ``job``,
        ``since``: unix time), as its heartbeat says; None when none does, or
        when the field is not what a worker writes (anyone may write it)."""
        raw = self.info.get("loop_blocked") or ""
        if not raw or len(raw) > BLOCKED_FIELD:
            return None
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # "[[[[...": json recurses per level
            return None
        if not isinstance(value, dict):
            return None
        return {
            "jid": str(value.get("jid", "?"))[:SHOWN],
            "job": str(value.get("job", "?"))[:SHOWN],
            "since": number(value.get("since")),
        }

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
    # TTL (MARK sets it, see worker/core.py); None without status tracking.
    runtime: float | None


@dataclass
class Listing:
    """What one view of the live processes read, and what it passed over."""

    processes: list[Process] = field(default_factory=list)
    members: int = 0  # of the masters and processes sets, when read
    examined: int = 0  # members read (SSCAN)
    strangers: int = 0  # members that are no identity: passed over unread
    silent: int = 0  # identities without a heartbeat (gone, or forged)
    capped: bool = False  # LISTED live processes found: the reading stopped there

    @property
    def unread(self) -> int:
        return max(0, self.members - self.examined)

    def notes(self) -> builtins.list[str]:
        """One line each for what the view did not show, for ``ps`` and the Busy page."""
        found = []
        if self.strangers:
            found.append(f"{self.strangers} member(s) of the process sets are no identity: skipped")
        if self.capped:
            found.append(f"only the first {LISTED} live processes are shown")
        if self.unread:
            found.append(
                f"{self.unread} of {self.members} member(s) of the process sets not read "
                f"(at most {EXAMINED} read per set: a flood of forged members?)"
            )
        return found


def identity_of(member: bytes | str) -> str | None:
    """The member as an identity, or None if it cannot be one (forged, or
    written by something else): then no round trip is spent on it."""
    if isinstance(member, bytes):
        if len(member) > 4 * 340:  # longer than any identity, even in 4-byte characters
            return None
        try:
            member = member.decode()
        except UnicodeDecodeError:
            return None
    return member if IDENTITY.fullmatch(member) else None


class ProcessSet:
    def __init__(self, connection: Connection = None, *, namespace: str | None = None) -> None:
        self.backend = Backend.resolve(connection, namespace)

    def list(self) -> list[Process]:
        """Live processes (at most LISTED): each master followed by its children,
        then lone workers (and children whose master is gone). ``listing()``
        says what was passed over."""
        return self.listing().processes

    def listing(self) -> Listing:
        """``list()``, with what it passed over: the masters set, then the
        processes set, a page at a time, each page's heartbeats in one round
        trip; at most EXAMINED members of each set, LISTED live processes."""
        redis, keys = self.backend.redis, self.backend.keys
        pipe = redis.pipeline(transaction=False)
        pipe.scard(keys.masters)
        pipe.scard(keys.processes)
        listing = Listing(members=sum(int(n) for n in answers(pipe, 0, 0)))
        found: dict[str, Process] = {}
        for key in (keys.masters, keys.processes):
            for identities in self._pages(key, listing):
                fresh = [i for i in identities if i not in found]
                pipe = redis.pipeline(transaction=False)
                for identity in fresh:
                    pipe.hgetall(keys.heartbeat(identity))
                for identity, beat in zip(fresh, answers(pipe, *([{}] * len(fresh))), strict=True):
                    if not beat:
                        listing.silent += 1
                    elif len(found) < LISTED:
                        info = {text(k): text(v) for k, v in beat.items()}
                        found[identity] = Process.from_heartbeat(identity, info)
                    else:
                        listing.capped = True
                if listing.capped:
                    break
        listing.processes = _grouped(builtins.list(found.values()))
        return listing

    def _pages(self, key: str, listing: Listing) -> Iterator[builtins.list[str]]:
        """The identities of ``key``, a page at a time, up to EXAMINED members
        (a set of another type reads as empty)."""
        cursor, read = 0, 0
        while read < EXAMINED:
            pipe = self.backend.redis.pipeline(transaction=False)
            pipe.sscan(key, cursor, count=min(PAGE, EXAMINED - read))
            cursor, members = answers(pipe, (0, []))[0]
            members = byte_list(members)
            read += len(members)
            listing.examined += len(members)
            identities = [i for i in map(identity_of, members) if i is not None]
            listing.strangers += len(members) - len(identities)
            yield identities
            if int(cursor) == 0:
                return

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
        removed = 0
        for key, lists in ((keys.masters, False), (keys.processes, True)):
            cursor = 0
            while True:  # a page at a time: never the whole set in memory (SPEC §8)
                pipe = redis.pipeline(transaction=False)
                pipe.sscan(key, cursor, count=PAGE)
                cursor, members = answers(pipe, (0, []))[0]
                stale = self._stale(byte_list(members), lists)
                if stale:
                    removed += int(redis.srem(key, *stale))
                if int(cursor) == 0:
                    break
        return removed

    def _stale(self, members: builtins.list[bytes], lists: bool) -> builtins.list[bytes]:
        """The members without a heartbeat (and, with ``lists``, an empty
        in-progress list); one that is no identity is stale at once."""
        keys = self.backend.keys
        named = [(m, identity_of(m)) for m in members]
        known = [(m, i) for m, i in named if i is not None]
        pipe = self.backend.redis.pipeline(transaction=False)
        for _, identity in known:
            pipe.exists(keys.heartbeat(identity))
            if lists:
                pipe.llen(keys.inprogress(identity))
        replies = answers(pipe, *([0] * len(known) * (2 if lists else 1)))
        step = 2 if lists else 1
        stale = [m for m, i in named if i is None]
        for n, (member, _) in enumerate(known):
            if not any(replies[n * step : n * step + step]):
                stale.append(member)
        return stale

    # builtins.list: inside this class, ``list`` is the method above.
    def running(self, processes: builtins.list[Process] | None = None) -> builtins.list[RunningJob]:
        """The jobs the live worker processes hold now, longest running first;
        two round trips. ``processes``: a ``list()`` already read, to reuse."""
        redis, keys = self.backend.redis, self.backend.keys
        workers = [p.identity for p in processes or self.list() if p.role != "master"]
        pipe = redis.pipeline(transaction=False)
        for identity in workers:  # bounded: a forged list may hold millions
            pipe.lrange(keys.inprogress(identity), 0, RUNNING_READ - 1)
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
            # A mark kept alive past its status_ttl (worker/core.py) tells no start.
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
