"""The orphan scan: finding the in-progress lists whose process is gone.

Every process that may hold jobs is a member of the ``processes`` set; its
heartbeat says it lives. A scan reads the set with SSCAN, a page at a time
(``PAGE`` members, a hint Redis keeps roughly), and judges a whole page in
one script (JUDGE_ORPHANS: heartbeats read, the fence's marks kept, the
lists' lengths read and the members with nothing left dropped, inside
Redis), however many members it holds. Only a list that holds jobs costs
more (its requeue). Reading the set whole and two round trips a member made
the master's first fork wait 21 s behind 100,000 forged members, and took a
child's heartbeat thread away for 15 s, long enough for its own heartbeat to
lapse and its jobs to be recovered elsewhere (a double run). So a scan is
work in bounded pages: ``step`` does one, and the callers run it off every
path that must stay prompt (the master's Redis thread between its other
duties, a child's scanner thread: never the heartbeat, the loop or the
start-up path).

The fence. A missing heartbeat is all another host can see of a death, and
anyone who can write to Redis can delete one: a review deleted a live
worker's heartbeat again and again and its ``retry=0`` job ran three times.
So a missing heartbeat is believed only once it has been missing for
``silent_grace`` seconds without its owner beating: the first scan to find
it missing sets a mark (``keys.silent``), whose age (by Redis's clock) the
next scans read, whichever process runs them; the owner deletes its mark at
every beat, in the beat's transaction. Workers use heartbeat_ttl / 2, more
than their beat interval (a third of the TTL), so a process that beats is
never recovered, however often its heartbeat is deleted; a heartbeat that
merely lapsed while its owner waited on a slow Redis costs nothing either.
What the fence does not stop: a writer who also forges the mark (a short TTL
makes it look old), or stops the process; the README's trust boundary says
so. The price: a lost host's jobs wait one more scan (a grace) to be
requeued. A forged member with no heartbeat and no list is dropped from the
set once its grace has passed, so a flood cleans itself away.

Each identity is judged apart: one whose keys Redis refuses to read (a
heartbeat forged as a string: WRONGTYPE), or whose fields are absurd, is
logged and passed over, and the others are still recovered. A Redis outage
(connection, timeout) ends the step; the next goes on from the same page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import redis

from jobmaster import liveness
from jobmaster.connection import byte_list
from jobmaster.recovery import Recovery, RecoveryReport
from jobmaster.scripts import JudgeOrphans

log = logging.getLogger("jobmaster.orphans")

PAGE = 500  # members judged per step (SSCAN's COUNT): a few round trips, however many
# Read from each heartbeat: "identity" tells whether the hash exists at all,
# the rest where and when its process lives (liveness.py).
HEARTBEAT_FIELDS = ("identity", "locus", "pid", "pid_started", "master_pid", "master_started")
# A silent heartbeat's mark lives this many graces, and at least SILENT_FLOOR
# seconds: without scans the count starts again, but a sweep of a flooded
# set takes longer than a few graces (100,000 members: about 10 s), and a
# mark that lapsed before the next sweep came back to it would never grow
# old enough: neither a lost host's list nor the flood itself would ever be
# dealt with. A long mark costs nothing: its owner deletes it at every beat.
SILENT_WINDOW = 4
SILENT_FLOOR = 300.0


def recover_orphans(
    recovery: Recovery, own_identity: str, stopping: Callable[[], bool] = lambda: False
) -> dict[str, RecoveryReport]:
    """Requeue the lists of every process whose heartbeat has expired, or whose
    process is provably gone from this machine (liveness.py): a whole sweep,
    page by page, until its end or ``stopping``. The identities recovered
    (an empty report: its list held nothing, and it was dropped)."""
    return OrphanSweep(recovery, own_identity).run(stopping)


class OrphanSweep:
    """One pass over the ``processes`` set, ``step`` by ``step``."""

    def __init__(self, recovery: Recovery, own_identity: str, page: int = PAGE) -> None:
        self.recovery = recovery
        self.redis = recovery.redis
        self.keys = recovery.keys
        self.scripts = recovery.scripts
        self.own = own_identity
        self.page = page
        self.cursor = 0
        self.done = False
        self.reports: dict[str, RecoveryReport] = {}

    def run(self, stopping: Callable[[], bool] = lambda: False) -> dict[str, RecoveryReport]:
        """Every step to the end of the set (or until ``stopping``); the lists recovered."""
        while not self.done and not stopping():
            self.step()
        return self.reports

    def step(self) -> bool:
        """Judge one page; True once the whole set has been read. Raises a Redis
        outage (the same page is read again at the next step)."""
        cursor, members = self.redis.sscan(self.keys.processes, self.cursor, count=self.page)
        identities = self._identities(byte_list(members))
        if identities:
            self._judge(identities)
        self.cursor = int(cursor)
        self.done = self.cursor == 0
        return self.done

    def _identities(self, members: list[bytes]) -> list[str]:
        found, strangers = [], 0
        for member in members:
            try:
                identity = member.decode()
            except UnicodeDecodeError:  # written by something else: no identity of ours
                strangers += 1
                continue
            if identity != self.own:
                found.append(identity)
        if strangers:  # one line a page, not one a member: a flood must not flood the log
            log.warning(
                "ignored %d member(s) of %s that are not worker identities",
                strangers,
                self.keys.processes,
            )
        return found

    def _judge(self, identities: list[str]) -> None:
        """The whole page in one JUDGE_ORPHANS (the fence included, in Redis);
        then the lists that hold jobs requeued, and the heartbeats that say
        their process is gone from this machine judged here (liveness.py)."""
        grace = self.recovery.silent_grace
        window = max(grace * SILENT_WINDOW, SILENT_FLOOR) if grace > 0 else 0.0
        call = JudgeOrphans(
            processes_key=self.keys.processes,
            heartbeat_keys=[self.keys.heartbeat(i) for i in identities],
            mark_keys=[self.keys.silent(i) for i in identities],
            inprogress_keys=[self.keys.inprogress(i) for i in identities],
            window_ms=round(window * 1000),
            grace_ms=round(grace * 1000),
            identities=identities,
            fields=HEARTBEAT_FIELDS,
        )
        gone = []
        for identity, verdict in zip(identities, call.run(self.scripts.judge_orphans), strict=True):
            kind, *rest = verdict
            if kind == 1:
                if _provably_dead(identity, rest):
                    gone.append(identity)
            elif kind == -1:
                _passed_over(identity, _text(rest[0]))
            elif rest[0] > 0:  # silent long enough, and its list holds jobs
                self._requeue(identity, "whose heartbeat expired")
            elif rest[0] == 0:  # silent long enough, nothing held: dropped by the script
                self.reports[identity] = RecoveryReport()
        if gone:  # not listed by ``ps`` any more
            self.redis.delete(*(self.keys.heartbeat(i) for i in gone))
            for identity in gone:
                self._requeue(identity, "whose process is gone from this machine")

    def _requeue(self, identity: str, why: str) -> None:
        try:
            report = self.recovery.requeue_all(identity)
            self.recovery.forget(identity)
        except redis.ResponseError as error:  # its keys, not Redis: a forged type...
            _passed_over(identity, error)
            return
        self.reports[identity] = report
        if report:
            log.warning(
                "recovered jobs of %s, %s: requeued %d, buried %d",
                identity,
                why,
                len(report.requeued),
                len(report.buried),
            )


def _provably_dead(identity: str, found: list[Any]) -> bool:
    fields = {
        name: value.decode(errors="replace") if isinstance(value, bytes) else value
        for name, value in zip(HEARTBEAT_FIELDS, found, strict=True)
        if value is not None
    }
    try:
        return liveness.provably_dead(fields)
    except Exception:  # a forged heartbeat nobody foresaw: judged alive, logged
        log.exception("could not judge %r; passed over", identity[:200])
        return False


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _passed_over(identity: str, error: object) -> None:
    log.warning("could not judge or recover %r (%s); passed over", identity[:200], error)
