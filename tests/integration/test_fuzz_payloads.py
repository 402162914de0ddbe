"""Fuzzing what a worker reads from Redis: any bytes, any JSON, broken payloads.

SPEC section 8, bad input: a payload that is not JSON, not an object, lacks
fields or names an unknown job goes to the dead set with its raw payload and
the reason; nothing crashes, nothing else is held up. Hypothesis writes
batches of entries straight into the places a worker reads from (a queue,
the scheduled and retry sets with any score, and the in-progress list of a
host that vanished) with good payloads mixed in, and one real worker
(threads in this process) runs over each batch. The worker is kept across
examples; each example starts from empty keys.

Every entry must end in exactly one of these states:

- done: a valid payload of a registered job that succeeded, so its status is
  ``complete`` and the job was called with exactly the payload's arguments;
- dead: in the dead set with a reason (``dead_reason``) and the payload kept:
  the raw bytes (``raw``, plus ``raw_hex`` when not UTF-8) for anything that
  is not a JSON object, every field of an object as it arrived (only the
  error fields a failure writes may differ);
- waiting: in the scheduled or retry set with a score still in the future,
  untouched (an entry is only looked at when it is due);
- moved: a valid payload recovered or polled into its own queue, when that
  is not the queue this worker serves (its "queue" field says where it goes).

Payload-shaped entries carry ``"retry": 0`` and their jobs are registered
with ``retry=0``, so a failure is dead at once instead of waiting out a
backoff in the retry set; arbitrary objects almost never form a valid
payload, so they don't reach the retry logic either.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import fuzzing
from tests.fuzzing import (
    ACCEPT,
    FAIL,
    any_char,
    canonical,
    json_scalars,
    small_json,
    small_json_lists,
    small_json_objects,
)
from tests.helpers import wait_until

K = Keys()
JID = re.compile(r"[0-9a-f]{24}")  # as jobmaster makes them
QUEUE = "default"
ORPHAN = "fuzz-lost-host:4242:0badf00d"  # a worker that vanished: no heartbeat, ever
WHERE = ("queue", "scheduled", "retry", "inprogress")
PAST, FUTURE = 1e9, 1e10  # 2001 and 2286: scores far from now, due or not without doubt
# Fields a failure (or the poller) writes over: the rest of a payload is kept.
REWRITTEN = frozenset(
    {
        "error_class",
        "error_message",
        "error_backtrace",
        "dead_reason",
        "died_at",
        "retry_count",
        "failed_at",
        "enqueued_at",
    }
)


# --- entries ---------------------------------------------------------------------


class NotJson:
    """What an entry that JSON cannot read parses to."""


NOT_JSON = NotJson()


def key_safe(value: object) -> bool:
    """Text that has a UTF-8 form (JSON may carry lone surrogates, which have none):
    only such text can name a Redis key, so a payload whose jid, queue or lock
    is not key-safe cannot run or move, and goes to the dead set."""
    if not isinstance(value, str):
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def parse(raw: bytes) -> Any:
    """The test's own strict JSON reading (the wire format refuses NaN, Infinity
    and numbers that overflow, since it could not write them back)."""

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value

    def refuse(text: str) -> None:
        raise ValueError(text)

    try:
        return json.loads(raw, parse_float=finite, parse_constant=refuse)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return NOT_JSON


@dataclass(frozen=True)
class Entry:
    raw: bytes
    where: str  # one of WHERE
    score: float = 0.0  # the scheduled and retry sets only
    good: bool = False  # a valid payload of ACCEPT: it must end done

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How hypothesis prints an entry of a failing example: short, as repr."""
        printer.text(repr(self))

    def __repr__(self) -> str:
        raw = (
            self.raw if len(self.raw) <= 120 else self.raw[:100] + b"...(%d bytes)" % len(self.raw)
        )
        score = f", score={self.score!r}" if self.where in ("scheduled", "retry") else ""
        return f"Entry({raw!r}, {self.where!r}{score}{', good=True' if self.good else ''})"

    @functools.cached_property
    def value(self) -> Any:
        return parse(self.raw)

    @property
    def is_object(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def jid(self) -> str | None:
        """The jid that names the entry's status key, if it has one."""
        value = self.value
        jid = value.get("jid") if isinstance(value, dict) else None
        return jid if isinstance(jid, str) and key_safe(jid) else None

    @property
    def due(self) -> bool:
        return self.where not in ("scheduled", "retry") or self.score <= PAST

    @property
    def runnable_shape(self) -> bool:
        """Has the fields and types a payload needs (whether its job exists or not)."""
        value = self.value
        return (
            isinstance(value, dict)
            and isinstance(value.get("jid"), str)
            and isinstance(value.get("job"), str)
            and isinstance(value.get("args"), list)
            and isinstance(value.get("queue"), str)
            and isinstance(value.get("kwargs", {}), dict)
            and all(key_safe(value.get(field)) for field in ("jid", "queue", "unique_digest"))
        )


def encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


DELETE = object()  # a mutation that removes the field
MUTABLE = [
    "jid",
    "job",
    "args",
    "kwargs",
    "queue",
    "timeout",
    "encrypted",
    "retry_count",
    "backoff",
    "unique",
    "unique_digest",
    "error_class",
    "dead_reason",
    "died_at",
    "enqueued_at",
    "created_at",
]
job_names = st.sampled_from([ACCEPT, FAIL, "os.system", "builtins.eval", "tests.fuzz.nope", ""])
good_jids = st.text(max_size=10)
jids = st.text(any_char, max_size=10)


def payload(jid: str, job: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        "jid": jid,
        "job": job,
        "args": args,
        "kwargs": kwargs,
        "queue": QUEUE,
        "retry": 0,
        "created_at": 1700000000.5,
    }


def mutated(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    result = dict(base)
    for field, value in changes.items():
        if value is DELETE:
            result.pop(field, None)
        else:
            result[field] = value
    return result


good_payloads = st.builds(
    payload, good_jids, st.just(ACCEPT), small_json_lists, small_json_objects
).map(encode)
broken_payloads = st.builds(
    mutated,
    st.builds(payload, jids, job_names, small_json_lists, small_json_objects),
    st.dictionaries(
        st.sampled_from(MUTABLE),
        st.just(DELETE) | st.sampled_from([QUEUE, "elsewhere", "", 0.001, 1e-9]) | small_json,
        max_size=3,
    ),
).map(encode)

# JSON text that is not an object, written the ways producers write it
# (lone surrogates turn into bytes that are not UTF-8).
non_object_json = st.builds(
    lambda value, ascii: json.dumps(value, ensure_ascii=ascii).encode("utf-8", "surrogatepass"),
    json_scalars | small_json_lists,
    st.booleans(),
)
raw_entries = st.one_of(
    st.binary(max_size=40),
    non_object_json,
    st.sampled_from([b"", b"null", b"NaN", b"[1e400]", b'{"a": Infinity}', b"{", b"\xff"]),
    st.dictionaries(st.sampled_from(MUTABLE) | st.text(max_size=6), small_json, max_size=5).map(
        encode
    ),
    broken_payloads,
)
scores = st.floats(max_value=PAST, allow_nan=False) | st.floats(min_value=FUTURE, allow_nan=False)


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    good = draw(st.integers(0, 3)) == 0
    raw = draw(good_payloads if good else raw_entries)
    where = draw(st.sampled_from(WHERE))
    score = draw(scores) if where in ("scheduled", "retry") else 0.0
    return Entry(raw, where, score, good)


def jid_key(entry: Entry) -> object:
    """Unique per batch: two entries sharing a jid would share one status key."""
    return ("jid", entry.jid) if entry.jid is not None else ("raw", entry.raw)


batches = st.lists(entries(), max_size=8, unique_by=(lambda e: e.raw, jid_key))


# --- pushing and looking -----------------------------------------------------------------


def sentinel(number: int) -> Entry:
    """A good job pushed after the batch: it must run, whatever came before it."""
    return Entry(
        encode(payload(f"sentinel-{number}", ACCEPT, ["sentinel"], {})), "queue", good=True
    )


def reset(store: redis.Redis, worker: WorkerProcess, batch: list[Entry]) -> None:
    """Empty every key an example uses, once the worker is idle and whole: an
    earlier example that left it otherwise must not be blamed on this one."""
    dead = [t.name for t in threads_of(worker) if not t.is_alive()]
    assert not dead, f"worker threads died in an earlier example: {THREAD_DEATHS or dead}"
    leftover = store.lrange(worker.ctx.inprogress_key, 0, -1)
    assert worker.manager.busy == 0 and not leftover, f"still held from before: {leftover!r}"
    queues = list(store.scan_iter(match=K.prefix + "queue:*", count=1000))
    store.delete(K.scheduled, K.retry, K.dead, K.inprogress(ORPHAN), *queues)
    for entry in batch:
        if entry.jid is not None:
            store.delete(K.status(entry.jid), K.attempts(entry.jid))
    fuzzing.forget_calls()


def push(store: redis.Redis, batch: list[Entry]) -> None:
    """Write the batch as a producer (or a lost host) would, the queue last."""
    pipe = store.pipeline(transaction=False)
    for entry in batch:
        if entry.where in ("scheduled", "retry"):
            pipe.zadd(
                K.scheduled if entry.where == "scheduled" else K.retry, {entry.raw: entry.score}
            )
        elif entry.where == "inprogress":
            pipe.lpush(K.inprogress(ORPHAN), entry.raw)
    pipe.execute()
    if any(entry.where == "inprogress" for entry in batch):
        store.sadd(K.processes, ORPHAN)  # registered only once its list is complete
    for entry in batch:
        if entry.where == "queue":
            store.lpush(K.queue(QUEUE), entry.raw)
    store.publish(K.wakeup_channel(QUEUE), len(batch))


@dataclass
class Snapshot:
    """Everything an entry can have become, read in one go."""

    dead: list[dict[str, Any]]
    status: dict[str, str | None]
    calls: Counter[str]
    sets: dict[str, dict[bytes, float]]
    queues: dict[str, list[bytes]]
    pending: int  # entries still on their way: queued, in progress, running
    dead_threads: list[str]

    @classmethod
    def read(cls, store: redis.Redis, worker: WorkerProcess, batch: list[Entry]) -> Snapshot:
        dead = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
        jids = [entry.jid for entry in batch if entry.jid is not None]
        values = store.mget([K.status(jid) for jid in jids]) if jids else []
        queues = {
            key.decode()[len(K.queue("")) :]: store.lrange(key, 0, -1)
            for key in store.scan_iter(match=K.prefix + "queue:*", count=1000)
        }
        pending = (
            store.llen(K.queue(QUEUE))
            + store.llen(K.inprogress(ORPHAN))
            + store.llen(worker.ctx.inprogress_key)
            + worker.manager.busy
            + int(bool(store.sismember(K.processes, ORPHAN)))  # recovered, not yet forgotten
        )
        return cls(
            dead=dead,
            status={jid: v.decode() if v else None for jid, v in zip(jids, values, strict=True)},
            calls=Counter(fuzzing.calls()),
            sets={
                "scheduled": dict(store.zrange(K.scheduled, 0, -1, withscores=True)),
                "retry": dict(store.zrange(K.retry, 0, -1, withscores=True)),
            },
            queues=queues,
            pending=pending,
            dead_threads=list(THREAD_DEATHS),
        )


# --- what each entry became ---------------------------------------------------------


def kept(
    original: dict[str, Any], stored: dict[str, Any], rewritten: frozenset[str] = REWRITTEN
) -> bool:
    """``stored`` is ``original`` with only the ``rewritten`` fields changed (and
    ``jid``/``kwargs`` filled in where ``original`` had none: a jid made up by the
    worker, so that a look-alike with a jid of its own is not taken for it)."""
    if "jid" not in original and not JID.fullmatch(str(stored.get("jid"))):
        return False
    skip = rewritten | ({"jid", "kwargs"} - original.keys())
    left = {k: v for k, v in original.items() if k not in rewritten}
    right = {k: v for k, v in stored.items() if k not in skip}
    return canonical(left) == canonical(right)


def holds(entry: Entry, dead: dict[str, Any]) -> bool:
    """Is ``dead`` the dead-set entry of ``entry``: its payload kept, with a reason?"""
    reason = dead.get("dead_reason")
    if not isinstance(reason, str) or not reason or not dead.get("error_class"):
        return False
    value = entry.value
    if isinstance(value, dict) and not key_safe(value.get("jid")):
        # A jid with no UTF-8 form cannot name a status key: the dead entry has a
        # new one, and the raw bytes (JSON escapes the surrogate) are kept.
        replaced = REWRITTEN | {"jid", "raw", "raw_hex"}
        return raw_kept(dead, entry.raw) and kept(value, dead, replaced)
    if isinstance(value, dict):
        return kept(value, dead)
    return raw_kept(dead, entry.raw) and dead.get("job") is None


def raw_kept(dead: dict[str, Any], raw: bytes) -> bool:
    """The dead entry holds ``raw`` exactly: as text, or in hex if it is not UTF-8."""
    if "raw_hex" in dead:
        return bool(dead["raw_hex"] == raw.hex())
    text = dead.get("raw")
    return isinstance(text, str) and text.encode("utf-8", "surrogatepass") == raw


def match(
    batch: list[Entry], dead: list[dict[str, Any]], listed: frozenset[int] = frozenset()
) -> dict[int, int]:
    """Pair entries with dead-set entries, each used once (Kuhn's augmenting paths:
    a greedy pairing could give an entry the dead record of a look-alike).

    Entries still ``listed`` in their sorted set were not buried (a move takes
    them out in the same step), so they own no dead record.
    """
    candidates = {
        i: [] if i in listed else [j for j, d in enumerate(dead) if holds(e, d)]
        for i, e in enumerate(batch)
    }
    owner: dict[int, int] = {}  # dead index -> entry index

    def assign(i: int, seen: set[int]) -> bool:
        for j in candidates[i]:
            if j not in seen:
                seen.add(j)
                if j not in owner or assign(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in candidates:
        assign(i, set())
    return {i: j for j, i in owner.items()}


def still_listed(batch: list[Entry], snap: Snapshot) -> frozenset[int]:
    """The entries still in the sorted set they were written to."""
    return frozenset(
        index
        for index, entry in enumerate(batch)
        if entry.where in snap.sets and entry.raw in snap.sets[entry.where]
    )


def was_called(entry: Entry, calls: Counter[str]) -> bool:
    value = entry.value
    return calls[canonical({"args": value["args"], "kwargs": value.get("kwargs", {})})] > 0


def fates(batch: list[Entry], snap: Snapshot) -> list[str | None]:
    """What each entry became (see the module docstring), None while unresolved."""
    buried = match(batch, snap.dead, still_listed(batch, snap))
    result: list[str | None] = []
    for index, entry in enumerate(batch):
        found = []
        if index in buried:
            found.append("dead")
        if entry.jid is not None and snap.status.get(entry.jid) == "complete":
            found.append("done")
        if not entry.due and snap.sets[entry.where].get(entry.raw) == entry.score:
            found.append("waiting")
        if entry.runnable_shape and entry.due and entry.value["queue"] != QUEUE:
            listed = snap.queues.get(entry.value["queue"], [])
            if any(
                kept(entry.value, parsed)
                for parsed in map(parse, listed)
                if isinstance(parsed, dict)
            ):
                found.append("moved")
        result.append("+".join(found) or None)
    return result


def explain(batch: list[Entry], snap: Snapshot) -> str:
    lines = [
        f"  {fate or 'UNRESOLVED'}: {entry!r}"
        for entry, fate in zip(batch, fates(batch, snap), strict=True)
    ]
    lines.append(f"  dead set: {[d.get('dead_reason') for d in snap.dead]}")
    lines.append(f"  pending: {snap.pending}; queues: {sorted(snap.queues)}")
    lines.append(f"  worker threads dead: {snap.dead_threads or 'none'}")
    return "\n".join(lines)


def expected(entry: Entry) -> set[str]:
    """The end states an entry may reach (exactly one of them, checked elsewhere)."""
    if not entry.due:
        return {"waiting"}
    if entry.good:
        return {"done"}
    if not entry.is_object:
        return {"dead"}
    if entry.where != "queue" and entry.runnable_shape and entry.value["queue"] != QUEUE:
        return {"moved"}
    return {"done", "dead"}


# --- the worker ---------------------------------------------------------------------


def threads_of(worker: WorkerProcess) -> list[threading.Thread]:
    return [
        *worker.manager.processors,
        worker.manager.listener,
        worker.heartbeat,
        worker.poller,
        worker.selfcheck,
        worker.watchdog,
    ]


THREAD_DEATHS: list[str] = []  # "thread: error", for the failure message


def record_thread_death(args: threading.ExceptHookArgs) -> None:
    """Note a worker thread's death in one line, for the failure message.

    Instead of pytest's hook, which formats the whole traceback: with the deep
    JSON examples below, that formatting failed here (CPython 3.11.7, "AST
    constructor recursion depth mismatch") and pytest stopped with an
    INTERNALERROR instead of reporting which example killed the thread.
    """
    name = args.thread.name if args.thread is not None else "?"
    THREAD_DEATHS.append(f"{name}: {args.exc_type.__name__}: {args.exc_value}")


@pytest.fixture
def worker(make_config: Callable[..., Config]) -> Iterator[WorkerProcess]:
    """One worker for every example. Its orphan scan runs every 0.1 s instead of
    every half heartbeat TTL (at least a second), so an example waits for the
    same code to run, only sooner."""
    process = WorkerProcess(make_config(concurrency=4, poll_interval=0.05, heartbeat_ttl=2))
    process.heartbeat.interval = process.heartbeat.orphan_interval = 0.1
    previous_hook, threading.excepthook = threading.excepthook, record_thread_death
    THREAD_DEATHS.clear()
    process.start()
    try:
        yield process
    finally:
        process.stop(timeout=5)
        threading.excepthook = previous_hook


def settle(store: redis.Redis, worker: WorkerProcess, batch: list[Entry]) -> Snapshot:
    """Wait until every entry has an end state and nothing is on its way."""
    snap = Snapshot.read(store, worker, batch)

    def resolved() -> bool:
        nonlocal snap
        snap = Snapshot.read(store, worker, batch)
        return snap.pending == 0 and all(fates(batch, snap))

    try:
        wait_until(resolved, timeout=15, interval=0.02)
    except AssertionError:
        raise AssertionError(
            "entries without an end state after 15 s:\n" + explain(batch, snap)
        ) from None
    return snap


# --- the tests -----------------------------------------------------------------------

DEEP = b"[" * 5000 + b"]" * 5000  # past json's recursion limit


def check_batch(store: redis.Redis, worker: WorkerProcess, batch: list[Entry], number: int) -> None:
    reset(store, worker, batch)
    last = sentinel(number)
    push(store, [*batch, last])
    everything = [*batch, last]
    snap = settle(store, worker, everything)
    dead = [t.name for t in threads_of(worker) if not t.is_alive()]
    assert not dead and not THREAD_DEATHS, f"worker threads died\n{explain(everything, snap)}"
    for entry, fate in zip(everything, fates(everything, snap), strict=True):
        assert fate in expected(entry), (
            f"{entry!r} ended {fate!r}, expected one of {sorted(expected(entry))}\n"
            + explain(everything, snap)
        )
        if fate == "done":
            assert was_called(entry, snap.calls), f"{entry!r} is complete but never ran"
    # Nothing else in the dead set: each record there belongs to one entry.
    buried = match(everything, snap.dead, still_listed(everything, snap))
    assert len(buried) == len(snap.dead), explain(everything, snap)
    assert store.llen(K.inprogress(ORPHAN)) == 0
    assert not store.sismember(K.processes, ORPHAN), "the lost host is still listed"


# The worker's threads use `random` (jitter) while hypothesis draws an example:
# hypothesis takes that for a strategy using `random` and warns.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@pytest.mark.timeout(110)
def test_any_entries_in_queues_sets_and_orphaned_lists_end_done_or_dead_with_their_payload(
    worker: WorkerProcess, store: redis.Redis
) -> None:
    examples = itertools.count()

    @settings(
        max_examples=30,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(batch=batches)
    @example(batch=[Entry(DEEP, where) for where in ("queue", "inprogress")])
    @example(batch=[Entry(DEEP, "scheduled", -math.inf), Entry(b"[[]]" * 3, "retry", 0.0)])
    @example(
        batch=[
            Entry(b'{"jid":"x","job":"tests.fuzz.accept","args":[' + b"9" * 5000 + b"]}", "queue")
        ]
    )
    @example(batch=[Entry(b"{}", "scheduled", 3.3e16), Entry(b'{"jid":null}', "queue")])
    @example(
        batch=[
            Entry(encode(payload("f1", FAIL, [], {})), "queue"),
            Entry(encode({**payload("f2", FAIL, [], {}), "retry_count": "many"}), "queue"),
            Entry(encode({**payload("e1", ACCEPT, [], {}), "encrypted": 7}), "scheduled", PAST),
            Entry(encode(payload("u1", "os.system", ["touch /tmp/pwned"], {})), "inprogress"),
            Entry(encode({**payload("m1", ACCEPT, [], {}), "queue": "elsewhere"}), "retry", -1.0),
            Entry(b"\xff\xfe garbage", "retry", math.inf),
            Entry(b"", "scheduled", -math.inf),
        ]
    )
    @example(  # lone surrogates (legal JSON escapes) where text names Redis keys
        batch=[
            Entry(
                b'{"jid":"\\ud800","job":"tests.fuzz.accept","args":[],"queue":"default"}', "queue"
            ),
            Entry(b'{"jid":"s1","job":"tests.fuzz.accept","args":[],"queue":"\\udc00"}', "retry"),
            Entry(
                b'{"jid":"s2","job":"tests.fuzz.accept","args":[],"queue":"\\udc00"}', "inprogress"
            ),
            Entry(
                b'{"jid":"s3","job":"tests.fuzz.fail","args":[],"queue":"default",'
                b'"unique":"until_executed","unique_digest":"\\udfff"}',
                "inprogress",
            ),
        ]
    )
    def check(batch: list[Entry]) -> None:
        check_batch(store, worker, batch, next(examples))

    check()


@pytest.mark.timeout(30)
def test_a_processes_member_that_is_no_identity_does_not_hold_up_orphan_recovery(
    worker: WorkerProcess, store: redis.Redis
) -> None:
    """Orphan recovery reads every member of the set of processes: one that is
    not UTF-8 (written by something else) must not stop it reaching the others."""
    lost = [f"fuzz-lost-{n}:1:00000000" for n in range(16)]
    good = [encode(payload(f"orphan-{n}", ACCEPT, [n], {})) for n in range(len(lost))]
    store.sadd(K.processes, b"\xff\xfe not an identity")
    for identity, raw in zip(lost, good, strict=True):
        store.lpush(K.inprogress(identity), raw)
    store.sadd(K.processes, *lost)
    wait_until(
        lambda: all(store.get(K.status(f"orphan-{n}")) == b"complete" for n in range(len(lost))),
        timeout=10,
        message="every orphaned job recovered and run",
    )
    assert all(store.llen(K.inprogress(identity)) == 0 for identity in lost)
    assert all(t.is_alive() for t in threads_of(worker))
