"""Moving jobs out of an in-progress list whose owner is not running them.

Used by a worker stopping (push back what is still running), by a worker's
self-check (entries whose acknowledgement failed), by the orphan scan (a
host whose heartbeat expired: orphans.py) and by the master (a child that
died). Each
entry moves with one TRANSFER script (BURY into the dead set) that only acts
if the entry is still in the list, so two recoverers racing never push a job
twice.

A move lands its entry or leaves it where it was (SPEC §8). A target key
that holds another type (a forged ``SET <ns>:queue:weird x``, and a payload
that names "weird") refuses it whole (``TargetRefused``); an entry that can
never reach its queue then goes to the dead set with the reason, and one
that cannot reach the dead set either stays where it was, logged as an
error: it is found again by the next recovery of that list.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from jobmaster import payload as wire
from jobmaster import registry
from jobmaster.connection import byte_list
from jobmaster.deadset import DeadSetLimits
from jobmaster.failure_hook import ON_FAILURE, listened
from jobmaster.keys import Keys
from jobmaster.scripts import Bury, BuryStep, Scripts, Transfer
from jobmaster.unique import MODES
from jobmaster.workflows.steps import step_of, workflow_step

log = logging.getLogger("jobmaster.recovery")

# BURY's reply when the job is buried but its on_failure hook job could not be
# queued (its queue's key holds another type): scripts.py.
HOOK_REFUSED = 2

# Decides, for an entry (as listed, and decoded), whether it goes back to a
# queue (return the payload to push, possibly changed) or to the dead set
# (return a reason).
Triage = Callable[[bytes, dict[str, Any]], "tuple[dict[str, Any], str | None]"]


class TargetRefused(Exception):
    """A move's target key holds another type than the move needs (a list for a
    queue, a sorted set for the others): nothing was moved."""

    def __init__(self, key: str, held: str) -> None:
        super().__init__(f"{key} holds a {held}")
        self.key = key
        self.held = held


@dataclass
class RecoveryReport:
    requeued: list[str] = field(default_factory=list)  # jids
    buried: list[str] = field(default_factory=list)  # jids

    def __bool__(self) -> bool:
        return bool(self.requeued or self.buried)


class Recovery:
    """Requeues (or buries) the entries of in-progress lists."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        scripts: Scripts,
        limits: DeadSetLimits,
        status_ttl: int = 0,
        silent_grace: float = 0.0,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.scripts = scripts
        self.limits = limits
        self.status_ttl = status_ttl  # 0: status tracking off
        # The orphan scan's fence (orphans.py): seconds an identity's
        # heartbeat must stay missing, as the scans see it, before its list is
        # requeued (0: at once).
        self.silent_grace = silent_grace

    def transfer(
        self,
        source: str,
        kind: str,
        raw: bytes,
        entry: dict[str, Any],
        target: str,
        where: str,
        *,
        score: float = 0.0,
        queue: str = "",
        status: str = "",
        unlock: str | None = None,
        hook: dict[str, Any] | None = None,
    ) -> bool:
        """One TRANSFER (see scripts.py): ``raw`` out of ``source``, ``entry`` into
        ``target`` (a queue's 'front' or 'back', or a 'zset'), only if still there.

        Into the dead set it is a BURY, which also releases the unique lock
        ``unlock`` (if the job holds it) and pushes the ``hook`` job, in the
        same step. Raises TargetRefused, with nothing moved, when ``target``
        holds another type."""
        dead = where == "zset"
        jid = str(entry.get("jid"))
        status = status if self.status_ttl else ""
        move = Transfer(
            source_key=source,
            target_key=target,
            queues_key=self.keys.queues,
            status_key=self.keys.status(jid),
            source_kind=kind,
            entry=raw,
            stored=wire.encode(entry),
            target_kind=where,
            score=score,
            queue=queue,
            wakeup_channel=self.keys.wakeup_channel(queue) if queue else "",
            cap=self.limits.max_jobs if dead else 0,
            cutoff=self.limits.cutoff(score) if dead else "-inf",
            status=status,
            status_ttl=self.status_ttl or 1,
        )
        if target != self.keys.dead:
            return _landed(move.run(self.scripts.transfer), target)
        hook_queue = str(hook["queue"]) if hook is not None else ""
        bury = Bury(
            transfer=move,
            lock_key=self.keys.unique(unlock or "-"),
            hook_queue_key=self.keys.queue(hook_queue) if hook is not None else self.keys.queues,
            unlock_jid=jid if unlock else "",
            hook_payload=wire.encode(hook) if hook is not None else b"",
            hook_queue=hook_queue,
            hook_channel=self.keys.wakeup_channel(hook_queue) if hook is not None else "",
            ended_channel=self.keys.ended_channel(jid) if status else "",  # wakes result()
        )
        step = step_of(entry)
        if step is None:
            reply = bury.run(self.scripts.bury)
        else:  # a batch or chain job buried: its workflow moves with it
            flow = workflow_step(self.keys, "dead", step, bool(status))
            reply = BuryStep(bury, flow, jid).run(self.scripts.bury_step)
        if reply == HOOK_REFUSED:
            log.error(
                "jid=%s buried, but its on_failure hook job was not queued: %s is not a list",
                jid,
                bury.hook_queue_key,
            )
        return _landed(reply, target)

    def requeue(
        self,
        list_key: str,
        entries: Iterable[bytes],
        *,
        queues: dict[bytes, str] | None = None,
        triage: Triage | None = None,
    ) -> RecoveryReport:
        """Put each entry back at the front of its queue (it was already waited for).

        ``queues`` gives the queue an entry was fetched from, when known;
        otherwise the payload's own ``queue`` field decides (as does a
        triage that sends it elsewhere: a crash queue). An entry that is not
        a valid payload is buried with its raw bytes, and so is one whose
        queue's key holds another type, with the reason: a name in a payload
        may be forged, and the entry would otherwise be in no key at all.
        """
        report = RecoveryReport()
        for raw in entries:
            try:
                payload = wire.decode(raw)
            except wire.BadPayload as error:
                self._bury(list_key, raw, wire.buried(raw, str(error), None), report)
                continue
            queue, reason = str(payload["queue"]), None
            if triage is not None:
                payload, reason = triage(raw, payload)
            if str(payload["queue"]) == queue:  # not sent elsewhere by the triage
                queue = (queues or {}).get(raw) or queue
            else:
                queue = str(payload["queue"])
            if reason is None:
                try:
                    if self.transfer(
                        list_key,
                        "list",
                        raw,
                        payload,
                        self.keys.queue(queue),
                        "front",
                        queue=queue,
                        status="queued",
                    ):
                        report.requeued.append(str(payload["jid"]))
                    continue
                except TargetRefused as refused:
                    reason = f"could not be requeued: {refused}"
            payload.update(dead_reason=reason, died_at=time.time())
            self._bury(list_key, raw, payload, report, hook=self._failure_hook(payload, reason))
        return report

    def bury(
        self,
        source: str,
        raw: bytes,
        reason: str,
        queue: str | None,
        *,
        kind: str = "list",
        entry: dict[str, Any] | None = None,
    ) -> RecoveryReport:
        """Move one entry of ``source`` (a list, or a sorted set with ``kind="zset"``)
        to the dead set with the reason: ``entry`` if given (a payload with its
        error fields), else its raw bytes kept."""
        report = RecoveryReport()
        if entry is None:
            entry = wire.buried(raw, reason, queue)
        else:
            entry = {**entry, "dead_reason": reason, "died_at": time.time()}
        self._bury(source, raw, entry, report, kind)
        return report

    def _bury(
        self,
        source: str,
        raw: bytes,
        entry: dict[str, Any],
        report: RecoveryReport,
        kind: str = "list",
        *,
        hook: dict[str, Any] | None = None,
    ) -> bool:
        """Into the dead set with its unique lock released and ``hook`` pushed, as
        one BURY: a crash in between can no longer leave the lock held or the
        hook never queued. A dead set of another type refuses it: it stays in
        ``source``, logged, and the next recovery of that list meets it again."""
        try:
            moved = self.transfer(
                source,
                kind,
                raw,
                entry,
                self.keys.dead,
                "zset",
                score=time.time(),
                status="dead",
                unlock=self._unique_lock(entry),
                hook=hook,
            )
        except TargetRefused as refused:
            log.error(
                "jid=%s could not be buried (%s): left in %s; it was to die because: %s",
                entry.get("jid"),
                refused,
                source,
                entry.get("dead_reason"),
            )
            return False
        if moved:
            report.buried.append(str(entry.get("jid")))
            log.error("buried jid=%s: %s", entry.get("jid"), entry.get("dead_reason"))
        return moved

    def _failure_hook(self, entry: dict[str, Any], reason: str) -> dict[str, Any] | None:
        """The job running its on_failure hook (see failure_hook.py): only a worker may run it.

        None when this process knows the job (preloaded) and it has no hook;
        a master that did not preload the app cannot tell, and queues it anyway.
        """
        known = registry.lookup(entry.get("job"))
        if known is not None and known.job_options.on_failure is None and not listened():
            return None
        hook = wire.build(ON_FAILURE, [entry, reason], {}, queue=str(entry.get("queue")))
        hook["enqueued_at"] = time.time()
        return hook

    def _unique_lock(self, entry: dict[str, Any]) -> str | None:
        """The unique lock a buried job (it will not run again) frees, if any."""
        lock = entry.get("unique_digest")
        if entry.get("unique") in MODES and isinstance(lock, str) and wire.key_safe(lock):
            return lock
        return None

    def requeue_all(self, identity: str, *, triage: Triage | None = None) -> RecoveryReport:
        """Requeue everything in ``identity``'s in-progress list."""
        key = self.keys.inprogress(identity)
        return self.requeue(key, byte_list(self.redis.lrange(key, 0, -1)), triage=triage)

    def forget(self, identity: str) -> None:
        """Drop a finished process from the set of list owners, if its list is empty."""
        if self.redis.llen(self.keys.inprogress(identity)) == 0:
            self.redis.srem(self.keys.processes, identity)


def _landed(reply: Any, target: str) -> bool:
    """What TRANSFER or BURY answered: moved or not; a type name is a refusal."""
    if isinstance(reply, bytes):
        raise TargetRefused(target, reply.decode(errors="replace"))
    return bool(reply)
