"""One place at a time (SPEC section 8), proved as a stateful property.

The example tests (test_late_outcomes.py and others) each follow one way a
job used to end in two places. Here hypothesis's ``RuleBasedStateMachine``
looks for the ways nobody thought of: it interleaves the real building
blocks of a worker, a master and an operator against a private Redis, from
this thread (no processor threads, no fork), and after every step checks
the contract:

- every jid pushed is in exactly one place: one queue, one in-progress list,
  the scheduled set, the retry set or the dead set; or finished (its success
  recorded by the process that held it), or deleted by an operator. Never
  in two, never nowhere (lost), and no jid that nobody pushed;
- each of those places holds what the model predicts, in order (queues and
  in-progress lists) and with its score (scheduled and retry sets);
- ``stat:processed`` and ``stat:failed`` count the outcomes recorded;
- the set of registered processes is the model's (the orphan scan finds an
  in-progress list only through its owner's registration);
- each job's status says where it is (Redis never disagrees with itself);
- FINISH records an outcome only for the process that still holds the
  entry: ``record`` answers True exactly when the model says the entry is
  still in that process's list, and a second outcome for the same entry (the
  watchdog's, then the thread's) is never recorded.

The model predicts from the rules, not from Redis: PUSH adds at a queue's
back, FETCH takes from the front of the first non-empty queue in the
worker's strict order, a push-back or requeue goes to the front, the poller
moves due entries in score order to the back, a failure retries until the
job's ``retry`` is used up, a crash is counted only against the one job that
ran alone. What it learns from the code is only what the code hands to its
caller: the entries a fetch returned (the bytes a thread holds) and, for
orphan recovery, the order in which Redis's set listed the orphans. A unit
is "held" while its exact entry is in its process's list: a job recovered
from under a live process and fetched again by that same process, byte for
byte, is held again, and the first of its two threads to finish records it.

The rules: push (now or scheduled), fetch into one of three worker
processes, finish with success / retry / dead (a late finish is the same
rule on a unit whose entry was pushed back or recovered: the bundle keeps
such units), halt with push-back, a child's death and the master's requeue
with exact crash blame (none, one or several jobs started, or unknown), a
heartbeat that expires, a beat, orphan recovery, the scheduled/retry
poller on a fake clock, an operator's kill, retry and delete, and
``jobmaster.cancel`` of any job.

And keys that refuse a move (SPEC §8: a move lands its entry or leaves it
where it was): a job whose payload names a queue whose key holds a string
(``"queue": "weird"``, pushed by hand onto a served queue) is buried with the
reason wherever a move takes it to its queue (a requeue, a push-back, the
poller, an operator's retry refused); and the dead set itself can be made a
string for a while, during which every burial, and every death recorded by
FINISH, leaves its entry where it was. And duplicate entries: the same bytes
pushed twice (a producer that retried its LPUSH) are two copies, each in one
place, each fetched, requeued and finished on its own (``Model.copies``).
And the producer's side: a push naming FORGED fails whole (a job for a
served queue in the same call does not land, a unique one leaves no lock),
and a set of queue names that holds a string never fails a push.

A bounded run is part of the suite. The long run, by hand::

    JOBMASTER_LONG_STATEFUL=1 .venv/bin/pytest -q -p no:cacheprovider \\
        tests/integration/test_one_place_machine.py

(5,000 examples; a number instead of 1 sets how many).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from types import SimpleNamespace
from unittest import mock

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from jobmaster import payload as wire
from jobmaster.api.cancels import Canceller
from jobmaster.api.sorted_sets import DeadSet, NotRunnable, RetrySet, ScheduledSet
from jobmaster.client import Client
from jobmaster.config import load_config
from jobmaster.deadset import DeadSetLimits
from jobmaster.errors import EnqueueError, Permanent
from jobmaster.identity import Identity
from jobmaster.keys import Keys
from jobmaster.orphans import recover_orphans
from jobmaster.poison import crash_triage
from jobmaster.recovery import Recovery, RecoveryReport
from jobmaster.scripts import Scripts
from jobmaster.slots import digest
from jobmaster.worker import poller
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.fetch import Fetcher
from jobmaster.worker.heartbeat import Heartbeat
from jobmaster.worker.outcome import Outcome, decide_failure, record, succeeded

K = Keys()
QUEUES = ("default", "other")
WORKERS = 3  # worker processes alive at any moment; a halt or a death replaces one
MAX_CRASHES = 2  # so that a poison pill is buried within a few steps
JOB = "tests.record"  # registered, no on_failure hook: a burial pushes no hook job
TIE = 1e-3  # added per score, so that no two entries of a set are due at the same time
FORGED = "weird"  # a queue whose key holds a string: forged payloads name it
SAVED_DEAD = "one-place:dead-set-saved"  # the dead set's entries while its key is forged
SAVED_NAMES = "one-place:queue-names-saved"  # the set of queue names while its key is forged
SECOND = "#2"  # the model's name of a duplicate's second copy: <jid>#2

LONG = os.environ.get("JOBMASTER_LONG_STATEFUL", "")
LONG_EXAMPLES = (int(LONG) if LONG.isdigit() and int(LONG) > 1 else 5000) if LONG else 0

# How often each path was taken, over a whole run: printed by the long run
# (pytest -s), so that a green run also shows it was not a vacuous one.
REACHED: Counter[str] = Counter()

# What a job's status says in each place (finished: its success was recorded).
STATUS = {
    "queue": b"queued",
    # A fetch writes no status: "working" is marked once the job has run for a
    # moment (worker/core.py), which this machine never lets a job do; every
    # way into a queue said "queued".
    "in progress": b"queued",
    "scheduled": b"scheduled",
    "retry": b"retrying",
    "dead": b"dead",
    "finished": b"complete",
    "cancelled": b"cancelled",
}


class Worker:
    """One worker process as the machine drives it: its context (identity and
    in-progress list), fetcher, heartbeat and poller, with no thread started."""

    def __init__(self, store: redis.Redis, url: str, slot: int, generation: int) -> None:
        # Two fetch orders, so that both queues are drained first by someone.
        self.order = QUEUES if slot % 2 == 0 else QUEUES[::-1]
        config = load_config(
            None,
            {
                "redis_url": url,
                "queues": list(self.order),
                "strict": True,
                "max_crashes": MAX_CRASHES,
            },
            env={},
        )
        # A nonce of its own, not a random one: which of two orphans Redis's set
        # lists first decides the order of their jobs in a queue, and hypothesis
        # needs the same steps to give the same states when it replays them.
        self.label = f"w{slot}.{generation}"
        identity = Identity(nonce=self.label)
        self.ctx = WorkerContext(
            config=config, identity=identity, redis=store, keys=K, scripts=Scripts(store)
        )
        self.fetcher = Fetcher(self.ctx)
        self.heartbeat = Heartbeat(
            self.ctx, info=dict, on_command=lambda _: None, stop=threading.Event()
        )
        self.poller = poller.ScheduledPoller(self.ctx, threading.Event())

    @property
    def name(self) -> str:
        return self.ctx.name


@dataclass(eq=False)
class Unit:
    """A fetched entry in the hands of a worker's thread, and what the model
    knew of its job when it was fetched (its failures so far)."""

    worker: Worker
    raw: bytes
    jid: str
    failures: int

    def __repr__(self) -> str:
        return f"Unit({self.jid[:8]} held by {self.worker.label})"


@dataclass
class Model:
    """Where each job should be, by the rules alone."""

    queues: dict[str, list[str]] = field(default_factory=lambda: {q: [] for q in QUEUES})
    # Per identity: (entry, jid), newest first, as LRANGE lists them.
    inprogress: dict[str, list[tuple[bytes, str]]] = field(default_factory=dict)
    scheduled: dict[str, float] = field(default_factory=dict)  # jid -> due
    retry: dict[str, float] = field(default_factory=dict)  # jid -> due
    dead: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    cancelled: set[str] = field(default_factory=set)  # removed while waiting
    pushed: list[str] = field(default_factory=list)
    home: dict[str, str] = field(default_factory=dict)  # jid -> its queue
    retry_limit: dict[str, int] = field(default_factory=dict)
    failures: Counter[str] = field(default_factory=Counter)  # retry_count
    crashes: Counter[str] = field(default_factory=Counter)  # crash_count
    suspects: set[str] = field(default_factory=set)
    processed: int = 0
    failed: int = 0
    registered: set[str] = field(default_factory=set)  # in the processes set
    beating: set[str] = field(default_factory=set)  # heartbeat key present
    dead_forged: bool = False  # the dead set's key holds a string: no burial lands
    twins: set[str] = field(default_factory=set)  # jids pushed twice (ids: jid, jid#2)

    def copies(self, jid: str) -> list[str]:
        """The model's ids of ``jid``'s entries: itself, and its second copy."""
        return [jid, jid + SECOND] if jid in self.twins else [jid]

    def where(self, jid: str) -> str | None:
        """The one place of ``jid``; None when finished or deleted (nowhere)."""
        for name, jids in self.queues.items():
            if jid in jids:
                return f"queue {name}"
        for identity, entries in self.inprogress.items():
            if any(held == jid for _, held in entries):
                return f"in progress of {identity}"
        for name, members in (("scheduled", self.scheduled), ("retry", self.retry)):
            if jid in members:
                return name
        if jid in self.dead:
            return "dead"
        return None

    def to_front(self, jid: str) -> str:
        """Pushed back or requeued: next to be fetched from its queue (see ``lands``)."""
        return self.lands(jid, front=True)

    def to_back(self, jid: str) -> str:
        """Pushed, polled or retried: behind every job waiting in its queue."""
        return self.lands(jid, front=False)

    def lands(self, jid: str, *, front: bool) -> str:
        """'queue'; or 'dead' when its queue's key refuses it (buried with the
        reason); or 'stays' when the dead set refuses it too."""
        queue = self.queues.get(self.home[jid])
        if queue is not None:
            queue.insert(0, jid) if front else queue.append(jid)
            return "queue"
        return self.buried(jid)

    def buried(self, jid: str) -> str:
        """'dead', or 'stays' where it was while the dead set's key is forged."""
        if self.dead_forged:
            return "stays"
        self.dead.add(jid)
        return "dead"


def jid_of(raw: bytes) -> str:
    return str(wire.decode(raw)["jid"])


def real(jid: str) -> str:
    """The jid of a model id (a duplicate's second copy is <jid>#2)."""
    return jid.removesuffix(SECOND)


class OnePlace(RuleBasedStateMachine):
    """Push, fetch, finish, stop, crash, recover, poll, kill and retry, in any order."""

    jids = Bundle("jids")
    units = Bundle("units")
    slots = st.integers(0, WORKERS - 1)

    def __init__(self, url: str, store: redis.Redis) -> None:
        super().__init__()
        REACHED["examples"] += 1
        store.flushall()
        store.set(K.queue(FORGED), "forged")  # a queue key that refuses every move to it
        self.url, self.redis = url, store
        self.client = Client(connection=store)
        # The master's recovery, as master.py builds it.
        self.master = Recovery(store, K, Scripts(store), DeadSetLimits(), self.client.status_ttl)
        self.model = Model()
        self.now = time.time()  # the fake clock the poller reads due times on; never behind
        self.ties = itertools.count(1)
        self.generations = itertools.count()
        # Answers of ``record`` checked after the places (see the invariant).
        self.answers: list[tuple[str, bool, bool]] = []
        self.labels: dict[str, str] = {}  # identity -> w<slot>.<generation>, for messages
        self.workers = [self._start(slot) for slot in range(WORKERS)]

    def _start(self, slot: int) -> Worker:
        """A new worker process in ``slot``: registered and beating, as at its start."""
        worker = Worker(self.redis, self.url, slot, next(self.generations))
        # The scan's fence (a heartbeat missing for half a TTL before it is
        # believed) is tested apart (test_orphan_scan.py): here one scan acts.
        worker.ctx.recovery.silent_grace = 0.0
        self.labels[worker.name] = worker.label
        worker.heartbeat.beat()
        self.model.registered.add(worker.name)
        self.model.beating.add(worker.name)
        return worker

    def _tie(self) -> float:
        return next(self.ties) * TIE

    # -- producers ------------------------------------------------------------
    @initialize(target=jids, jobs=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=4))
    def some_jobs_waiting(self, jobs: list[str]) -> object:
        """Each example starts with work in the queues (retry: 1)."""
        return multiple(*(self._push(queue, 1, None) for queue in jobs))

    @rule(
        target=jids,
        queue=st.sampled_from(QUEUES),
        retry=st.integers(0, 2),
        later=st.sampled_from([None, None, 600.0, 1800.0]),
        jobs=st.integers(1, 3),
    )
    def push(self, queue: str, retry: int, later: float | None, jobs: int) -> object:
        """A producer pushes ``jobs`` jobs, now or ``later`` seconds on, allowing
        ``retry`` retries (0: dead at the first failure)."""
        return multiple(*(self._push(queue, retry, later) for _ in range(jobs)))

    def _push(self, queue: str, retry: int, later: float | None) -> str:
        item: dict[str, object] = {"job": JOB, "args": ["one place"], "queue": queue}
        item["retry"] = retry
        at = None if later is None else self.now + later + self._tie()
        if at is not None:
            item["at"] = at  # the fake clock is never behind real time: in the future
        jid = self.client.push(item)
        assert jid is not None
        REACHED["push" if at is None else "push scheduled"] += 1
        model = self.model
        model.pushed.append(jid)
        model.home[jid], model.retry_limit[jid] = queue, retry
        if at is None:
            model.to_back(jid)
        else:
            model.scheduled[jid] = at
        return jid

    @rule(queue=st.sampled_from(QUEUES), twice=st.booleans())
    def push_by_hand(self, queue: str, twice: bool) -> None:
        """A producer in another language LPUSHes onto ``queue``: with ``twice``,
        the same bytes two times (it retried after a lost reply), else a payload
        whose ``queue`` names FORGED, a key holding a string (a forged name:
        every move to its queue is refused, and it is buried instead)."""
        payload = wire.build(JOB, ["by hand"], {}, queue=queue if twice else FORGED)
        payload.update(retry=1, enqueued_at=time.time())
        raw = wire.encode(payload)
        jid, model = str(payload["jid"]), self.model
        self.redis.lpush(K.queue(queue), *([raw] * (2 if twice else 1)))
        self.redis.set(K.status(jid), "queued")
        model.pushed.append(jid)
        model.retry_limit[jid] = 1
        for copy in [jid, jid + SECOND] if twice else [jid]:
            model.home[copy], model.retry_limit[copy] = queue if twice else FORGED, 1
            model.queues[queue].append(copy)
        if twice:
            model.twins.add(jid)
        REACHED["push twice" if twice else "push naming a forged queue"] += 1

    @rule(target=jids, queue=st.sampled_from(QUEUES))
    def push_past_forged_queue_names(self, queue: str) -> str:
        """The set of queue names holds a string during a push: only an index,
        it never fails the push (the producer would retry and double it)."""
        if self.redis.exists(K.queues):
            self.redis.rename(K.queues, SAVED_NAMES)
        self.redis.set(K.queues, "forged")
        try:
            jid = self._push(queue, 1, None)
        finally:
            self.redis.delete(K.queues)
            if self.redis.exists(SAVED_NAMES):
                self.redis.rename(SAVED_NAMES, K.queues)
            # The push could not list its queue: the next push to it does
            # (here at once, or a cancel, which looks through the listed
            # queues only, would not find the job).
            self.redis.sadd(K.queues, queue)
        REACHED["push past forged queue names"] += 1
        return jid

    @rule(queue=st.sampled_from(QUEUES), unique=st.booleans())
    def push_refused(self, queue: str, unique: bool) -> None:
        """A push naming FORGED (its key holds a string) fails whole, before any
        write: a job for a served queue in the same call does not land either,
        and a unique one leaves no lock held (the model does not move)."""
        fine = wire.build(JOB, ["refused"], {}, queue=queue)
        forged = wire.build(JOB, ["refused"], {}, queue=FORGED)
        forged.update(unique="until_executed", unique_digest="one-place")
        with pytest.raises(EnqueueError, match=f"{K.queue(FORGED)} holds a string"):
            if unique:
                self.client.push_unique(forged, 60)
            else:
                self.client.push_payloads([fine, forged])
        assert not self.redis.exists(K.unique("one-place"))
        assert not self.redis.exists(K.status(str(fine["jid"])), K.status(str(forged["jid"])))
        REACHED["unique push refused" if unique else "push refused whole"] += 1

    @rule(forged=st.booleans())
    def forge_the_dead_set(self, forged: bool) -> None:
        """The dead set's key holds a string for a while (its entries kept aside),
        or is itself again: meanwhile no burial lands, and its entry stays."""
        model = self.model
        if forged == model.dead_forged:
            return
        if forged:
            if self.redis.exists(K.dead):
                self.redis.rename(K.dead, SAVED_DEAD)
            self.redis.set(K.dead, "forged")
        else:
            self.redis.delete(K.dead)
            if self.redis.exists(SAVED_DEAD):
                self.redis.rename(SAVED_DEAD, K.dead)
        model.dead_forged = forged
        REACHED["dead set forged" if forged else "dead set restored"] += 1

    # -- a worker's threads ---------------------------------------------------
    @rule(target=units, slot=slots, count=st.integers(1, 3))
    def fetch(self, slot: int, count: int) -> object:
        worker, model = self.workers[slot], self.model
        expected: list[tuple[str, str]] = []
        for queue in worker.order:
            while len(expected) < count and model.queues[queue]:
                expected.append((model.queues[queue].pop(0), queue))
        fetched = worker.fetcher.fetch_many(count)
        got = [(jid_of(unit.raw), unit.queue) for unit in fetched]
        assert got == [(real(jid), queue) for jid, queue in expected]
        REACHED[f"fetch of {len(fetched)}"] += 1
        entries = model.inprogress.setdefault(worker.name, [])
        held = []
        for unit, (jid, _) in zip(fetched, expected, strict=True):
            payload = wire.decode(unit.raw)
            # The marks the rules put on a payload travel with it.
            assert payload.get("retry_count", 0) == model.failures[jid], "retry_count"
            assert payload.get("crash_count", 0) == model.crashes[jid], "crash_count"
            # A suspect's group (a half of those that died together) or True (alone).
            suspect = bool(payload.get("crash_suspect", False))
            assert suspect == (jid in model.suspects), "suspect"
            entries.insert(0, (unit.raw, jid))  # LMOVE to the list's left end
            held.append(Unit(worker, unit.raw, jid, model.failures[jid]))
        return multiple(*held)

    @rule(
        unit=consumes(units),
        how=st.sampled_from(["done", "fail", "permanent"]),
        backoff=st.sampled_from([0.0, 300.0, 3000.0]),
        twice=st.booleans(),
    )
    def finish(self, unit: Unit, how: str, backoff: float, twice: bool) -> None:
        """A thread records its job's outcome: on time, or late (its entry was
        pushed back or recovered meanwhile), and with ``twice`` a second
        outcome for the same entry (the watchdog's, then the thread's)."""
        model = self.model
        payload = wire.decode(unit.raw)
        delay = backoff + self._tie()
        if real(unit.jid) in model.twins:
            # Two copies failing at one fake moment store the same bytes in the
            # retry set (one member: sets merge them). That is no loss (each
            # copy ran, one retry is left) but it is not two places either; so
            # the copies of a duplicate only succeed here.
            how = "done"
        if how == "done":
            outcome, kind = succeeded(payload), "done"
        else:
            error = ValueError("failing on purpose") if how == "fail" else Permanent("never")
            outcome = decide_failure(payload, error, delay, self.now)
            exhausted = unit.failures + 1 > model.retry_limit[unit.jid]
            kind = "dead" if how == "permanent" or exhausted else "retry"
        assert outcome.kind == kind
        entries = model.inprogress.get(unit.worker.name, [])
        # Held while an entry of its bytes is listed: FINISH removes the first
        # one (LREM count 1), whichever copy of a duplicate that is.
        held = next((entry for entry in entries if entry[0] == unit.raw), None)
        lands = held is not None and not (kind == "dead" and model.dead_forged)
        recorded = record(unit.worker.ctx, unit.raw, outcome)
        self.answers.append((f"{how} of {unit!r}", recorded, lands))
        late = "" if held else ": late, not recorded"
        REACHED[f"finish {kind}" + (late if lands or not held else ": dead set forged, stays")] += 1
        if held is not None and lands:
            entries.remove(held)
            self._recorded(held[1], outcome, delay)
        if twice and not any(entry[0] == unit.raw for entry in entries):
            # (Its other copy still listed here would be taken: the running
            # table, not FINISH, keeps one thread from recording twice.)
            again = record(unit.worker.ctx, unit.raw, outcome)
            self.answers.append((f"second {how} of {unit!r}", again, False))

    def _recorded(self, jid: str, outcome: Outcome, delay: float) -> None:
        model = self.model
        model.processed += 1
        if outcome.kind == "done":
            model.finished.add(jid)
            return
        model.failed += 1
        model.failures[jid] += 1
        if outcome.kind == "retry":
            model.retry[jid] = self.now + delay
        else:
            assert model.buried(jid) == "dead"

    # -- stops, deaths and recoveries -----------------------------------------
    def _holding(self) -> bool:
        return any(self.model.inprogress.get(worker.name) for worker in self.workers)

    def _holder(self, slot: int) -> int:
        """``slot``, or the next one whose worker holds jobs (stopping or killing
        an idle one proves little; the rules that call this need a holder)."""
        return next(
            s
            for s in (*range(slot, WORKERS), *range(slot))
            if self.model.inprogress.get(self.workers[s].name)
        )

    def _requeue(self, identity: str, report: RecoveryReport) -> str:
        """The model of requeueing ``identity``'s list to its queues' fronts (no
        blame): each entry requeued, buried (its queue refused it) or left in the
        list (the dead set refused it too); checked against ``report``. Returns
        a word for REACHED."""
        model, moved = self.model, defaultdict(list)
        for raw, jid in model.inprogress.pop(identity, []):
            moved[model.to_front(jid)].append((raw, jid))
        assert report.requeued == [real(jid) for _, jid in moved["queue"]]
        assert report.buried == [real(jid) for _, jid in moved["dead"]]
        self._left(identity, moved["stays"])
        return "stays" if moved["stays"] else "buried" if moved["dead"] else ""

    def _left(self, identity: str, entries: list[tuple[bytes, str]]) -> None:
        """What stayed in a list no process will run: it stays registered (it is
        forgotten only once empty), for the orphan scans to meet again."""
        if entries:
            self.model.inprogress[identity] = entries
        else:
            self.model.registered.discard(identity)

    @precondition(_holding)
    @rule(slot=slots)
    def halt(self, slot: int) -> None:
        """A worker stops: everything in its list goes back to the front of its
        queue (the halt's own LRANGE and requeue), then it clears its heartbeat.
        Its threads may still record late: their units stay in the bundle."""
        slot = self._holder(slot)
        worker, model = self.workers[slot], self.model
        entries = self.redis.lrange(worker.ctx.inprogress_key, 0, -1)
        report = worker.ctx.recovery.requeue(worker.ctx.inprogress_key, entries)
        worker.heartbeat.clear()
        count = len(model.inprogress.get(worker.name, []))
        what = self._requeue(worker.name, report)
        REACHED[f"halt pushing back {min(count, 3)}{'+' * (count > 3)} {what}".rstrip()] += 1
        model.beating.discard(worker.name)
        self.workers[slot] = self._start(slot)

    @precondition(_holding)
    @rule(slot=slots, started=st.sampled_from(["none", "newest", "oldest", "all", "unknown"]))
    def child_dies(self, slot: int, started: str) -> None:
        """A child is SIGKILLed; its master requeues its list with crash blame.

        ``started``: which entries of its list had started, as its slots tell
        the master: none, the newest or the oldest fetched (alone: counted),
        all of them (side by side when more than one: suspects, not counted),
        or "unknown" (no slots: every entry is counted).
        """
        slot = self._holder(slot)
        worker, model = self.workers[slot], self.model
        entries = model.inprogress.pop(worker.name, [])
        picked = {"none": [], "newest": entries[:1], "oldest": entries[-1:], "all": entries}
        running = picked.get(started)
        digests = None if running is None else tuple(digest(raw) for raw, _ in running)
        triage = crash_triage(MAX_CRASHES, "", "SIGKILL", "died", started=digests)
        report = self.master.requeue_all(worker.name, triage=triage)
        self.redis.delete(K.heartbeat(worker.name))
        self.master.forget(worker.name)
        requeued, buried, stays = [], [], []
        for raw, jid in entries:
            # By digest, as the triage does: the copies of a duplicate share one.
            ran = running is None or digest(raw) in (digests or ())
            beside = ran and running is not None and len(running) > 1
            crashes = model.crashes[jid] + (ran and not beside)
            # A poison pill is buried; the others requeued (or buried: a queue refused).
            where = model.buried(jid) if crashes >= MAX_CRASHES else model.to_front(jid)
            if where == "stays":  # nothing written: its entry is as it was
                stays.append((raw, jid))
                continue
            model.crashes[jid] = crashes
            if beside:
                model.suspects.add(jid)  # ran beside others: not counted
            (requeued if where == "queue" else buried).append(real(jid))
        assert (report.requeued, report.buried) == (requeued, buried)
        alone = running is not None and len(running) > 1
        what = "suspects" if alone else f"{len(buried)} buried" if buried else "no burial"
        REACHED[f"child dies, started {started}: {what}" + (", some stay" if stays else "")] += 1
        self._left(worker.name, stays)
        model.beating.discard(worker.name)
        self.workers[slot] = self._start(slot)

    @rule(slot=slots, beating=st.booleans())
    def heartbeat(self, slot: int, beating: bool) -> None:
        """A worker beats (registered, heartbeat written with its TTL), or its
        heartbeat expires (a long pause, a SIGSTOP): the process lives on."""
        worker, model = self.workers[slot], self.model
        if beating:
            worker.heartbeat.beat()
            model.registered.add(worker.name)
            model.beating.add(worker.name)
        else:
            self.redis.delete(K.heartbeat(worker.name))
            model.beating.discard(worker.name)

    @precondition(lambda self: self.model.registered - self.model.beating)
    @rule(slot=slots)
    def recover_orphans(self, slot: int) -> None:
        """A worker's orphan scan: every registered process but itself whose
        heartbeat is gone has its list requeued and is forgotten."""
        worker, model = self.workers[slot], self.model
        orphans = model.registered - model.beating - {worker.name}
        reports = recover_orphans(worker.ctx.recovery, worker.name)
        assert set(reports) == orphans
        # No rule orders the orphans: they are requeued as Redis lists its set.
        for identity, report in reports.items():
            empty = not model.inprogress.get(identity)
            what = self._requeue(identity, report)
            REACHED["orphan recovered" + (", its list empty" if empty else f" {what}")] += 1

    # -- the scheduled and retry sets ----------------------------------------
    @precondition(lambda self: self.model.scheduled or self.model.retry)
    @rule(advance=st.sampled_from([0.0, 400.0, 1000.0, 4000.0]))
    def poll(self, advance: float) -> None:
        """The clock moves on, and one poller step moves what is due to its queue's back."""
        self.now += advance
        now, model = self.now, self.model
        with mock.patch.object(poller, "time", SimpleNamespace(time=lambda: now)):
            self.workers[0].poller.step()
        for members in (model.scheduled, model.retry):  # the order step() polls them in
            for _, jid in sorted((due, jid) for jid, due in members.items() if due <= now):
                where = model.to_back(jid)
                if where != "stays":
                    del members[jid]
                source = "scheduled" if members is model.scheduled else "retry"
                landed = "" if where == "queue" else f": {where}"
                REACHED[f"poller moved from {source}{landed}"] += 1

    @rule(
        move=st.sampled_from(
            [(kind, "retry") for kind in ("scheduled", "retry", "dead")]
            + [(kind, "delete") for kind in ("scheduled", "retry", "dead")]
            + [(kind, "kill") for kind in ("scheduled", "retry")]
        ),
        pick=st.integers(0, 2),
        other=jids,
    )
    def operator(self, move: tuple[str, str], pick: int, other: str) -> None:
        """An operator's retry (to its queue's back), delete, or kill (to the
        dead set) of an entry of a set: the ``pick``-th in the set's order, or
        where the set is empty, the ``other`` job's entry, which is not there
        (nothing is done: the move is made only if the entry is still there)."""
        kind, action = move
        model = self.model
        if kind == "dead" and model.dead_forged:
            REACHED["operator: the dead set is forged"] += 1
            return  # (the operator's tools cannot read a string as a set)
        if kind == "dead":  # in the order they were pushed: jids are random
            # (not a duplicate's copies: found by jid, which one is not said)
            listed = [jid for jid in model.pushed if jid in model.dead - model.twins]
        else:
            due = model.scheduled if kind == "scheduled" else model.retry
            listed = sorted(due, key=due.__getitem__)
        jid = listed[pick % len(listed)] if listed else other
        there = jid in listed
        api = {"scheduled": ScheduledSet, "retry": RetrySet, "dead": DeadSet}[kind](self.client)
        refused = action == "kill" and model.dead_forged
        refused |= action == "retry" and model.home[jid] not in model.queues
        if there and refused:  # its target key refuses it: it stays, and the operator is told
            with pytest.raises(NotRunnable, match="holds a string"):
                getattr(api, action)(jid)
            REACHED[f"operator {action} from {kind}: refused"] += 1
            return
        if there and kind == "dead":
            model.dead.remove(jid)
        elif there:
            del due[jid]
        if action == "kill":
            assert isinstance(api, ScheduledSet | RetrySet)
            assert api.kill(jid) == there
            if there:
                model.dead.add(jid)
        elif action == "retry":
            assert api.retry(jid) == there
            if there:
                model.to_back(jid)
        else:
            assert api.delete(jid) == there
            if there:
                model.deleted.add(jid)
        REACHED[f"operator {action} from {kind}" + ("" if there else ": not there")] += 1

    @rule(jid=jids)
    def cancel(self, jid: str) -> None:
        """``jobmaster.cancel``: a waiting job (queue, scheduled, retry) leaves its
        place in the same step that marks it cancelled; a job in progress stays
        (only a request is written: its worker stops it); an ended one is not
        cancelled."""
        model = self.model
        where = model.where(jid)
        result = Canceller(self.client).cancel(jid)
        if jid in model.deleted:  # its status is where it was deleted from: a request
            REACHED["cancel of a deleted job"] += 1
            return
        if where is None or where == "dead":
            assert not result.cancelled, f"{jid} had ended ({where or 'finished'})"
            REACHED["cancel of an ended job"] += 1
            return
        assert result.cancelled
        if where.startswith("in progress"):
            assert result.removed_from is None
            REACHED["cancel of a job in progress: a request"] += 1
            return
        assert result.removed_from == where, f"{jid} removed from {result.removed_from}"
        if where.startswith("queue "):
            model.queues[model.home[jid]].remove(jid)
        else:
            del (model.scheduled if where == "scheduled" else model.retry)[jid]
        model.cancelled.add(jid)
        REACHED[f"cancel from {where.split()[0]}"] += 1

    # -- the contract ---------------------------------------------------------
    def _observe(self) -> tuple[dict[str, list[str]], dict[str, list[bytes]]]:
        """Every place a jid can be in Redis: jid -> the places it was found,
        in order (queues: next to be fetched first; lists: newest first)."""
        found: dict[str, list[str]] = defaultdict(list)
        order: dict[str, list[bytes]] = {}
        named = {*QUEUES, *(q.decode() for q in self.redis.smembers(K.queues))} - {FORGED}
        for name in sorted(named):
            entries = self.redis.lrange(K.queue(name), 0, -1)[::-1]  # fetched from the right
            order[f"queue {name}"] = entries
        for key in sorted(self.redis.scan_iter(match=K.inprogress("*"), count=1000)):
            identity = key.decode().removeprefix(K.inprogress(""))
            order[f"in progress of {identity}"] = self.redis.lrange(key, 0, -1)
        for place, entries in order.items():
            for raw in entries:
                found[jid_of(raw)].append(place)
        for kind, key in self._sets().items():
            for raw in self.redis.zrange(key, 0, -1):
                found[jid_of(raw)].append(kind)
        return found, order

    def _sets(self) -> dict[str, str]:
        """The sorted sets' keys (the dead set's entries are aside while it is forged)."""
        dead = SAVED_DEAD if self.model.dead_forged else K.dead
        return {"scheduled": K.scheduled, "retry": K.retry, "dead": dead}

    @invariant()
    def one_place_at_a_time(self) -> None:
        """One invariant, its checks in this order: the places are the
        contract, so a job recorded by a thread that lost it fails as the job
        in two places it makes, before the answer ``record`` gave."""
        REACHED["checks (after each step)"] += 1
        self._places()
        self._counters_and_statuses()
        wrong = [(what, got) for what, got, holds in self.answers if got != holds]
        assert not wrong, f"record answered against the rule (True: recorded): {wrong}"
        self.answers.clear()

    def _named(self, places: list[str]) -> list[str]:
        """Places with worker labels (w<slot>.<generation>) for identities."""
        named = []
        for place in places:
            identity = place.removeprefix("in progress of ")
            named.append(f"in progress of {self.labels[identity]}" if identity != place else place)
        return named

    def _places(self) -> None:
        model = self.model
        found, order = self._observe()
        strangers = set(found) - set(model.pushed)
        assert not strangers, f"jobs nobody pushed: {sorted(strangers)}"
        for jid in model.pushed:
            places = sorted(self._named(found.get(jid, [])))
            wheres = [w for w in map(model.where, model.copies(jid)) if w is not None]
            if not wheres:
                gone = "finished" if jid in model.finished else "deleted or cancelled"
                assert not places, f"{jid} is {gone}, yet still in {places}"
            else:  # one place for each copy (two for a job pushed twice)
                expected = sorted(self._named(wheres))
                lost = "no place: lost"
                assert places == expected, f"{jid} should be in {expected}, is in {places or lost}"
        # Then the order and the scores: what each place holds, as predicted.
        for name, jids in model.queues.items():
            queued = [jid_of(raw) for raw in order[f"queue {name}"]]
            assert queued == [real(jid) for jid in jids], f"queue {name}"
        for place, entries in order.items():
            if place.startswith("in progress of "):
                identity = place.removeprefix("in progress of ")
                assert entries == [raw for raw, _ in model.inprogress.get(identity, [])], place
        for kind in ("scheduled", "retry"):
            scored = self.redis.zrange(getattr(K, kind), 0, -1, withscores=True)
            members = model.scheduled if kind == "scheduled" else model.retry
            assert {jid_of(raw): score for raw, score in scored} == members, kind
        dead = {jid_of(raw) for raw in self.redis.zrange(self._sets()["dead"], 0, -1)}
        assert dead == {real(jid) for jid in model.dead}, "dead"
        # The orphan scan finds a list only through its owner's registration.
        registered = {member.decode() for member in self.redis.smembers(K.processes)}
        assert registered == model.registered, "registered processes"

    def _counters_and_statuses(self) -> None:
        model = self.model
        counters = [int(self.redis.get(K.stat(n)) or 0) for n in ("processed", "failed")]
        assert counters == [model.processed, model.failed], "stat:processed, stat:failed"
        # (a duplicate's two copies share one status: the last one written)
        alive = [jid for jid in model.pushed if jid not in model.deleted | model.twins]
        statuses = self.redis.mget([K.status(jid) for jid in alive]) if alive else []
        for jid, status in zip(alive, statuses, strict=True):
            place = model.where(jid) or ("cancelled" if jid in model.cancelled else "finished")
            kind = next(k for k in STATUS if place.startswith(k))
            shown = self._named([place])[0]
            assert status == STATUS[kind], f"{jid} is in {shown} with status {status!r}"


def machine_settings() -> settings:
    if LONG_EXAMPLES:
        return settings(
            max_examples=LONG_EXAMPLES,
            stateful_step_count=80,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
    return settings(
        max_examples=100,
        stateful_step_count=50,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# A green run takes about 15 s. The bound is far above that so that a failing
# run reports its shrunk example: hypothesis may shrink for minutes (it stops
# itself after 300 s), and a timeout in the middle shows only a confusing
# FlakyStrategyDefinition instead of the steps.
@pytest.mark.timeout(6 * 3600 if LONG_EXAMPLES else 600)
def test_every_job_is_in_exactly_one_place_whatever_workers_masters_and_operators_do(
    redis_url: str, store: redis.Redis
) -> None:
    REACHED.clear()
    started = time.monotonic()
    run_state_machine_as_test(lambda: OnePlace(redis_url, store), settings=machine_settings())
    if LONG_EXAMPLES:
        print(f"\n{REACHED['examples']} examples in {time.monotonic() - started:.0f} s:")
        for path, times in sorted(REACHED.items()):
            print(f"  {times:>9,}  {path}")
