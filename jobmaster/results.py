"""A job's result: read with its status, and waited for without polling.

The worker's FINISH script writes a job's final status, its return value
(JSON text, only when it is not None, under ``keys.result``) and its last
attempt in one atomic step, all with one TTL (``status_ttl``, or the job's
``result_ttl``), and then PUBLISHes on the job's ``keys.ended_channel``.

``wait_for`` reads the status (and result); if the job has not ended it
SUBSCRIBEs to that channel, waits for Redis to confirm the subscription,
and reads again: a job that ended between the first read and the
subscription is seen by the second read, one that ends after it sends a
message. So a wait costs a handful of Redis commands however long it is,
and a result is seen within a pub/sub hop of the job's end.

Pub/sub is fire-and-forget: a message published while our connection was
being re-established is lost. The status is read again every
``RECHECK_EVERY`` seconds of waiting, so a lost message costs at most that
much delay, never a wait to the end.

This module is the producer side: it imports nothing from the worker or
supervisor.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Literal

import redis
from redis import exceptions as redis_errors

from jobmaster import crypto
from jobmaster import payload as wire
from jobmaster.errors import (
    JobFailed,
    JobmasterError,
    RedisPermissionError,
    ResultPending,
    UnknownJob,
)
from jobmaster.keys import Keys
from jobmaster.scripts import PEEK_LIST, PeekList
from jobmaster.tolerant import absent, moment, optional_text, refused, wrong_type

log = logging.getLogger("jobmaster.results")

# Statuses after which a job will not run again (unless an operator retries
# it from the dead set). "skipped": its batch was cancelled before it ran.
ENDED = frozenset({"complete", "dead", "failed", "cancelled", "expired", "skipped"})
RECHECK_EVERY = 5.0  # seconds: the most a lost pub/sub message can delay a result
WAITER_MARGIN = 5  # seconds a waiter's key outlives its wait
PARSE_BYTES = 1024 * 1024  # the longest dead-set entry parsed for a failure's error
ATTEMPTS_READ = 50  # the newest attempts read (a job retried 25 times made 26)
ATTEMPT_BYTES = 64 * 1024  # of each attempt read: a longer one is forged, and skipped
ATTEMPT_TEXTS = ("outcome", "error_class", "error_message", "worker", "job", "queue")


def waiting_ttl(status_ttl: int, due: float, now: float) -> int:
    """The TTL of the status of a job that waits until ``due`` (scheduled, or a
    retry): its wait, plus ``status_ttl``. With ``status_ttl`` alone a job
    scheduled (or retried) further ahead than it was unknown before it ran:
    ``cancel`` said False and ``result`` raised UnknownJob (SPEC §11)."""
    return status_ttl + max(0, math.ceil(due - now))


@dataclass(frozen=True)
class Snapshot:
    """What Redis holds for one jid, read in one round trip."""

    jid: str
    status: str | None  # None: unknown or expired
    result: bytes | None  # the return value's JSON text; None when it returned None

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    def value(self) -> Any:
        """The return value of a complete job (None if it returned None).

        What Redis holds may be forged (SPEC §8): a result that is not JSON
        is logged and read as None rather than raised from a caller's wait.
        """
        if self.result is None:
            return None
        text: bytes | str = self.result
        if crypto.looks_sealed(self.result):  # an encrypt=True job's: opened with our keys
            token = self.result.decode(errors="replace")
            try:
                text = crypto.open_text(token, self.jid, crypto.RESULT)
            except crypto.DecryptError as error:  # no key, another key, or forged
                raise JobmasterError(f"{error} (an encrypt=True job's result)") from None
        try:
            return wire.strict_loads(text)
        except (ValueError, UnicodeDecodeError) as error:
            log.warning("result of jid=%s is not JSON (%s): read as None", self.jid, error)
            return None


def read(connection: redis.Redis, keys: Keys, jid: str) -> Snapshot:
    """The job's status and result (one pipeline, two reads); its attempts are
    read only when a failure needs them (``failure``).

    A key someone overwrote with another type reads as absent, as the
    operator API reads it (tolerant.answers); a read Redis refuses to this
    user (NOPERM) raises RedisPermissionError: a result the user may not
    read is not "no result".
    """
    pipe = connection.pipeline(transaction=False)
    pipe.get(keys.status(jid))
    pipe.get(keys.result(jid))
    return snapshot(keys, jid, pipe.execute(raise_on_error=False))


def snapshot(keys: Keys, jid: str, replies: list[Any]) -> Snapshot:
    """``read``'s two replies (status, result) as a Snapshot (aio/results.py too)."""
    status, result = replies
    status = absent(status, keys.status(jid), "~" + keys.status("*"))
    result = absent(result, keys.result(jid), "~" + keys.result("*"))
    return Snapshot(
        jid, optional_text(status), result.encode() if isinstance(result, str) else result
    )


def _peek_list(connection: redis.Redis) -> Any:
    """PEEK_LIST on ``connection`` (registering is a SHA1 of its text, no round trip)."""
    return connection.register_script(PEEK_LIST)


def attempts(connection: redis.Redis, keys: Keys, jid: str) -> list[dict[str, Any]]:
    """The job's newest ``ATTEMPTS_READ`` attempts, oldest first, each one a dict
    of the fields the worker writes, tolerant of forgery (SPEC §8): an entry
    that is not a JSON object, or longer than ``ATTEMPT_BYTES``, is skipped
    (never read whole: PEEK_LIST cuts it in Redis); times are finite or None,
    texts are text; a list of another type reads as none. A list too large to
    be a worker's is not read (``newest``): one entry says so."""
    found = newest(connection, keys, jid, ATTEMPTS_READ)
    if found is None:
        return [_unread(connection, keys, jid)]
    return [attempt_fields(attempt) for attempt in found]


def newest(
    connection: redis.Redis, keys: Keys, jid: str, count: int
) -> list[dict[str, Any]] | None:
    """The job's newest ``count`` attempts as stored (JSON objects only, each
    read to ``ATTEMPT_BYTES``); None when the list is too large to be a
    worker's.

    PEEK_LIST still copies each entry into Lua, in Redis: about a second per
    100 MB with Redis blocked meanwhile. So the list's size is asked first
    (MEMORY USAGE, which copies nothing): a worker's attempts are a few KiB
    each, and a list whose entries are on average longer than
    ``ATTEMPT_BYTES`` is forged, and not read.
    """
    key, grant = keys.attempts(jid), "~" + keys.attempts("*")
    pipe = connection.pipeline(transaction=False)
    sized_into(pipe, key)
    readable = worth_reading(jid, key, grant, pipe.execute(False))
    if readable is not True:
        return readable  # [] (none) or None (too large to be a worker's)
    try:
        peeked = peek_call(key, count).run(_peek_list(connection))
    except redis_errors.ResponseError as error:
        if wrong_type(error):
            return []
        raise refused(error, key, grant) from error
    return peeked_attempts(peeked)


def sized_into(pipe: Any, key: str) -> None:
    """The attempts list's length and size, asked on ``pipe`` (``worth_reading``)."""
    pipe.llen(key)
    pipe.memory_usage(key, samples=0)  # every entry counted


def worth_reading(
    jid: str, key: str, grant: str, replies: list[Any]
) -> Literal[True] | list[dict[str, Any]] | None:
    """True when the attempts list is to be read; else what ``newest`` returns
    without reading it: [] (none) or None (too large to be a worker's)."""
    length, used = (absent(reply, key, grant) for reply in replies)
    if not length:
        return []
    if int(used or 0) > max(ATTEMPTS_READ, int(length)) * ATTEMPT_BYTES:
        log.warning("attempts of jid=%s hold %s bytes in %d entries: not read", jid, used, length)
        return None
    return True


def peek_call(key: str, count: int) -> PeekList:
    return PeekList(key=key, start=-count, stop=-1, keep=ATTEMPT_BYTES)


def peeked_attempts(peeked: list[Any]) -> list[dict[str, Any]]:
    """PEEK_LIST's reply as attempts: JSON objects read whole only."""
    found = []
    for head, size in zip(peeked[::2], peeked[1::2], strict=True):
        attempt = _json_object(head) if int(size) <= len(head) else None
        if attempt is not None:
            found.append(attempt)
    return found


def _unread(connection: redis.Redis, keys: Keys, jid: str) -> dict[str, Any]:
    """What stands for an attempts list too large to be a worker's (forged)."""
    used = connection.memory_usage(keys.attempts(jid), samples=0)  # a second look, rare
    message = f"{int(used or 0):,} bytes: too large to be a worker's (forged?), not read"
    return {**attempt_fields({}), "error_class": "Unreadable", "error_message": message}


def attempt_fields(attempt: dict[str, Any]) -> dict[str, Any]:
    """One attempt as read: only the worker's fields, each of its type or None."""
    return {
        "started_at": moment(attempt.get("started_at")),
        "ended_at": moment(attempt.get("ended_at")),
        **{name: _text(attempt.get(name)) for name in ATTEMPT_TEXTS},
    }


def status(connection: redis.Redis, keys: Keys, jid: str) -> str | None:
    """The job's status; None if unknown or expired (or its key forged as
    another type). A status that is not UTF-8 is decoded with replacement."""
    try:
        found = connection.get(keys.status(jid))
    except redis_errors.ResponseError as error:
        if wrong_type(error):
            return None
        raise refused(error, keys.status(jid), "~" + keys.status("*")) from error
    return optional_text(found)


def outcome(connection: redis.Redis, keys: Keys, found: Snapshot) -> Any:
    """The value of an ended job, or JobFailed with why it failed."""
    if found.status == "complete":
        return found.value()
    error_class, error_message = failure(connection, keys, found)
    raise JobFailed(found.jid, str(found.status), error_class, error_message)


def failure(connection: redis.Redis, keys: Keys, found: Snapshot) -> tuple[str | None, str | None]:
    """The error class and message of a job that ended without a result.

    Its last attempt says it when the worker decided the end (retries
    exhausted, a Permanent error, retry=False). A job buried by the master
    (a poison pill, a payload that cannot run) has no such attempt: its
    dead-set entry holds the reason, found by ZSCAN on this rare path.
    """
    told = told_by_attempt(newest(connection, keys, found.jid, 1), found)
    if told is not None or found.status != "dead":
        return told or (None, None)
    try:
        entry = _dead_entry(connection, keys, found.jid)
    except RedisPermissionError as error:  # a producer's user: say so, still JobFailed
        return None, dead_set_refused(error)
    return told_by_dead_entry(entry, found.jid)


def told_by_attempt(
    last: list[dict[str, Any]] | None, found: Snapshot
) -> tuple[str | None, str | None] | None:
    """The failure as the job's last attempt tells it, if the worker decided
    the end; None when the dead set must be asked (or nothing tells it)."""
    attempt = last[-1] if last else None
    if (
        attempt is not None
        and attempt.get("outcome") == found.status
        and (attempt.get("error_class") or attempt.get("error_message"))
    ):
        return _text(attempt.get("error_class")), _error_message(attempt, found.jid)
    return None


def dead_set_refused(error: RedisPermissionError) -> str:
    return f"(the reason is in the dead set, which this Redis user may not read: {error})"


def told_by_dead_entry(entry: dict[str, Any] | None, jid: str) -> tuple[str | None, str | None]:
    """The failure as the job's dead-set entry tells it."""
    if entry is None:
        return None, None
    if "crash_count" in entry:  # buried by the master: it killed its worker process
        return "PoisonPill", _text(entry.get("dead_reason"))
    message = _error_message(entry, jid) or _text(entry.get("dead_reason"))
    return _text(entry.get("error_class")), message


def _error_message(fields: dict[str, Any], jid: str) -> str | None:
    """An attempt's or entry's error message; an encrypt=True job's opened with
    our keys (or why it cannot be: a producer without the key sees that)."""
    token = fields.get(crypto.SEALED_ERROR)
    if token is None:
        return _text(fields.get("error_message"))
    try:
        opened = _json_object(crypto.open_text(token, jid, crypto.ERROR))
    except crypto.DecryptError as error:
        return f"(sealed: {error.reason})"
    return _text((opened or {}).get("error_message"))


def _dead_entry(connection: redis.Redis, keys: Keys, jid: str) -> dict[str, Any] | None:
    try:
        for member, _ in connection.zscan_iter(keys.dead, match=dead_match(jid), count=500):
            entry = dead_entry_of(member, jid)
            if entry is not None:
                return entry
    except redis_errors.ResponseError as error:
        if wrong_type(error):  # the dead set's key holds another type
            return None
        raise refused(error, keys.dead, "~" + keys.dead) from error
    return None


def dead_match(jid: str) -> str:
    """The ZSCAN pattern of the dead-set entries that may be ``jid``'s."""
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in jid)
    return f"*{escaped}*"


def dead_entry_of(member: bytes, jid: str) -> dict[str, Any] | None:
    """A dead-set member as ``jid``'s entry, or None if it is another's (or unreadable)."""
    entry = _json_object(member if len(member) <= PARSE_BYTES else None)
    return entry if entry is not None and entry.get("jid") == jid else None


def _json_object(raw: bytes | str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = wire.strict_loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def wait_for(connection: redis.Redis, keys: Keys, jid: str, wait: float = 0) -> Any:
    """The job's return value once it is ``complete``, waiting up to ``wait`` seconds.

    Raises JobFailed (it ended dead, failed, cancelled, expired or skipped),
    ResultPending (it has not ended in time) or UnknownJob (no status).
    """
    return outcome(connection, keys, wait_end(connection, keys, jid, wait))


def wait_end(connection: redis.Redis, keys: Keys, jid: str, wait: float = 0) -> Snapshot:
    """What Redis holds for the job once it has ended, waiting up to ``wait``
    seconds: ``cancel(wait=...)`` reads its final status from it.

    Raises ResultPending (it has not ended in time) or UnknownJob (no status).
    """
    found = read(connection, keys, jid)
    if first_look(found, wait):
        return found
    started = time.monotonic()
    deadline = started + float(wait)
    _register(connection, keys, jid, wait)
    pubsub = connection.pubsub()  # type: ignore[no-untyped-call]
    try:
        try:
            pubsub.subscribe(keys.ended_channel(jid))
            _confirmed(pubsub, deadline)
        except redis_errors.ResponseError as error:  # NOPERM: the ACL lacks the channel
            raise subscribe_refused(error, keys, jid) from error
        while True:
            # Read after the subscription is confirmed: an end published
            # before it is seen here, one published after it wakes us.
            found = read(connection, keys, jid)
            left = left_to_wait(found, started, deadline)
            if left is None:
                return found
            _message(pubsub, min(left, RECHECK_EVERY))
    finally:
        pubsub.close()


def first_look(found: Snapshot, wait: float) -> bool:
    """True if the job has ended; UnknownJob without a status, ResultPending
    if it has not ended and ``wait`` is none: else the wait begins."""
    if found.status is None:
        raise UnknownJob(found.jid)
    if found.ended:
        return True
    if not wait or wait <= 0:
        raise ResultPending(found.jid, found.status, 0.0)
    return False


def left_to_wait(found: Snapshot, started: float, deadline: float) -> float | None:
    """What a read during the wait means: None (it ended), the seconds left to
    wait, UnknownJob (it expired while we waited) or ResultPending (time is up)."""
    if found.status is None:
        raise UnknownJob(found.jid)
    if found.ended:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise ResultPending(found.jid, found.status, time.monotonic() - started)
    return left


def subscribe_refused(error: redis_errors.ResponseError, keys: Keys, jid: str) -> Exception:
    """A refused SUBSCRIBE as raised (NOPERM: the ACL lacks the channel)."""
    grant = f"+subscribe and &{keys.ended_channel('*')}"
    return refused(error, f"SUBSCRIBE {keys.ended_channel(jid)}", grant)


def waiter(keys: Keys, jid: str, wait: float) -> tuple[str, int]:
    """The waiter's key of ``jid`` and its TTL for a wait of ``wait`` seconds."""
    return keys.result_waiter(jid), math.ceil(wait) + WAITER_MARGIN


def _register(connection: redis.Redis, keys: Keys, jid: str, wait: float) -> None:
    """Say that someone waits for the job's end: a worker publishes it only
    then (FINISH reads every waiter's key of a round trip in one MGET, where a
    PUBLISH per job cost a Redis command for each of them). Set before the
    subscription and the read that follows it, so an end recorded after the
    read always finds it; it outlives the wait, and several waiters share it."""
    key, ttl = waiter(keys, jid, wait)
    try:
        connection.set(key, 1, ex=ttl)
    except redis_errors.ResponseError as error:  # NOPERM: the ACL lacks the key
        raise waiter_refused(error, keys, key) from error


def waiter_refused(error: redis_errors.ResponseError, keys: Keys, key: str) -> Exception:
    return refused(error, f"SET {key}", f"~{keys.result_waiter('*')}")


def _confirmed(pubsub: Any, deadline: float) -> None:
    """Wait for Redis's reply to SUBSCRIBE: until it comes, an end published
    now might not reach us (the read that follows would then race it)."""
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
        if message is not None and message.get("type") == "subscribe":
            return


def _message(pubsub: Any, timeout: float) -> None:
    """Block until a message on the channel, or ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while (left := end - time.monotonic()) > 0:
        message = pubsub.get_message(timeout=left)
        if message is not None and message.get("type") == "message":
            return


SHOW_BYTES = 64 * 1024  # of a result the CLI and the dashboard read and show


@dataclass(frozen=True)
class Preview:
    """A result as ``jobmaster status`` and the dashboard show it: anyone who
    can write to Redis can plant a 100 MB result, so only its first
    ``SHOW_BYTES`` are read (GETRANGE), with its full size (STRLEN)."""

    head: bytes  # the first SHOW_BYTES of the JSON text
    size: int  # its full length in bytes

    @property
    def truncated(self) -> bool:
        return self.size > len(self.head)

    @property
    def sealed(self) -> bool:
        """An encrypt=True job's result: shown as sealed, never opened for a view."""
        return crypto.looks_sealed(self.head)

    @property
    def text(self) -> str:
        if self.sealed:
            return f"(sealed: encrypt=True, {self.size:,} bytes)"
        return self.head.decode(errors="replace")

    @property
    def value(self) -> Any:
        """The decoded value when read whole and valid JSON, else the text."""
        if not self.truncated and not self.sealed:
            try:
                return wire.strict_loads(self.head)
            except (ValueError, UnicodeDecodeError):
                pass
        return self.text


def preview(
    connection: redis.Redis, keys: Keys, jid: str, limit: int = SHOW_BYTES
) -> Preview | None:
    """The stored result's first ``limit`` bytes and size; None when there is none
    (a job not complete, or one that returned None). Never raises on a key of
    another type (it reads as none)."""
    pipe = connection.pipeline(transaction=False)
    pipe.getrange(keys.result(jid), 0, limit - 1)
    pipe.strlen(keys.result(jid))
    grant = "~" + keys.result("*")
    head, size = (absent(reply, keys.result(jid), grant) for reply in pipe.execute(False))
    if not size:
        return None
    return Preview(head.encode() if isinstance(head, str) else bytes(head or b""), int(size))
