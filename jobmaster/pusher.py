"""The producer's lean path: one PUSH, one round trip, shared by the threads
that push at the same moment.

Duties: pack a PUSH as one EVALSHA (hiredis's packer, no pool checkout, no
command parsing on the way back); let concurrent callers of one process share
a round trip (auto-pipelining); give each caller its own reply or its own
exception; load the script on NOSCRIPT; never re-send a PUSH that may have run.

Sharing a round trip, without a thread hop. A caller queues its packed call
and tries the sender lock. Whoever gets it sends *every* call waiting at that
moment in one write and reads their replies in order. A caller that finds the
lock taken sleeps on its call's own gate, which the sender opens when the
call is answered (so an answered caller returns at once, instead of queueing
for the lock behind the next round trip), or, for the oldest call still
waiting when a round trip ends, to make its thread the next sender. A lone
caller sends its own call: no other thread, no gate, no wait (flat
combining). Sixteen threads of one process: about 8 jobs a round trip.

What is re-sent, and why that is safe. A reply that does not come (the
connection dropped, the socket timed out, the send failed half way) leaves
each call of that round trip unknown: Redis may have run it, may still run it
(a Redis blocked past our timeout runs what it read when it wakes), or never
got it. Re-sending it could enqueue a job twice, so it is not re-sent: each
caller of that round trip gets ``LostReply`` (a ``redis.ConnectionError``),
and the job's status (``queued`` once pushed, when status tracking is on)
tells whether it landed. Re-sent are only calls that cannot have run:
- before anything is written, a connection found closed by the server
  (a restart, an idle timeout: its EOF is already there) is replaced, and
  the round trip goes out on the new one;
- a NOSCRIPT reply means that call did not run (a restarted or flushed
  Redis lost the script): the script is loaded and those calls are sent
  again, once, still under the lock;
- so does a READONLY reply (a primary demoted by a failover refused the
  write): sent again once, on a new connection, which redis-py's Sentinel
  pool points at the promoted primary.
An error reply (a forged queue key, out of memory) is that caller's alone,
and a call whose reply was read before the connection failed keeps it: it
ran, and failing it would invite the caller to enqueue it again.

Fork. A forked child must not write into its parent's socket, nor wait for a
lock that a thread of the parent held at the fork, nor answer calls queued
by threads it does not have: after a fork (``os.register_at_fork``, and a pid
check for forks that skip it) each pusher starts over with a new lock, an
empty queue and no connection (the parent's socket is left to the parent).
"""

from __future__ import annotations

import collections
import os
import select
import socket
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
from redis._parsers.base import BaseParser
from redis.commands.core import Script
from redis.exceptions import NoScriptError

# hiredis >= 2.1 (a dependency) packs in C; redis-py's packer otherwise.
_pack = getattr(hiredis, "pack_command", None)

# Error replies of calls that certainly did not run, so are sent again (once):
# NOSCRIPT (a restarted or flushed Redis lost the script: it is loaded) and
# READONLY (a primary demoted by a failover: a new connection finds the new one).
NOT_RUN = (NoScriptError, redis.ReadOnlyError)
MOST_PER_ROUND_TRIP = 256  # calls per write: bounds one round trip's buffer
READ_SIZE = 65536
NUDGE_WAIT = 0.05  # seconds: a waiting caller looks again after this, nudged or not


class LostReply(redis.ConnectionError):
    """The round trip failed after its call was sent: it may or may not have run.
    Not re-sent (that could enqueue the job twice)."""


class _Call:
    """One caller's PUSH, packed, and what came back for it."""

    __slots__ = ("answered", "done", "error", "gate", "packed", "reply")

    def __init__(self, packed: bytes) -> None:
        self.packed = packed
        self.reply: Any = None
        self.error: BaseException | None = None
        self.answered = False  # a reply (or an error reply) was read for it
        self.done = False  # its round trip is over: reply or error is final
        # Made (closed) only when its thread has to wait: it sleeps on it until
        # a sender opens it, when the call is done or to make it the next sender.
        self.gate: threading.Lock | None = None

    def open(self) -> None:
        gate = self.gate  # read after ``done`` was set: see Pusher.run
        if gate is not None:
            try:  # noqa: SIM105 - suppress() costs a microsecond on every push
                gate.release()
            except RuntimeError:  # open already: one wake-up is enough
                pass


_pushers: weakref.WeakSet[Pusher] = weakref.WeakSet()


def _start_over_after_fork() -> None:
    for pusher in list(_pushers):
        pusher.start_over()


os.register_at_fork(after_in_child=_start_over_after_fork)


class Pusher:
    """Runs one script (PUSH) on a connection of its own, for every thread of the process."""

    def __init__(self, client: redis.Redis, script: Script) -> None:
        self._pool = client.connection_pool
        self._script = script
        self._pid = os.getpid()
        self._lock = threading.Lock()  # the sender's: held for one whole round trip
        self._waiting: collections.deque[_Call] = collections.deque()
        self._sha = script.sha
        self._conn: Any = None  # a redis-py Connection, made (and handshaken) on first use
        self._reader: Any = None  # hiredis's reader, one per connection
        self._poll: Any = None  # tells a server-closed connection before we write
        self._packer = None if _pack is not None else _fallback_packer()
        self.round_trips = 0  # writes sent (a NOSCRIPT reload not counted): shows the sharing
        _pushers.add(self)

    def start_over(self) -> None:
        """Forget the lock, the queued calls and the connection (in a forked child)."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._waiting = collections.deque()
        self._conn = self._poll = None  # never closed here: its socket is the parent's too

    def run(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """The script's reply for these KEYS and ARGV, or its error raised."""
        if self._pid != os.getpid():
            self.start_over()
        call = _Call(_packed(self._packer, ("EVALSHA", self._sha, len(keys), *keys, *args)))
        self._waiting.append(call)
        armed = False
        while not call.done:
            if self._lock.acquire(blocking=False):
                try:
                    if not call.done:
                        self._round_trip()
                finally:
                    self._lock.release()
                    if self._waiting:
                        self._nudge()
            elif not armed:
                # A round trip is on its way (ours may be in it). The gate is
                # made, then ``done`` and the lock looked at again before any
                # sleep: a sender that finished meanwhile found no gate to open.
                call.gate = threading.Lock()
                call.gate.acquire()
                armed = True
            else:
                call.gate.acquire(timeout=NUDGE_WAIT)  # type: ignore[union-attr]
        if call.error is not None:
            raise call.error
        return call.reply

    def _nudge(self) -> None:
        """Wake the oldest call still waiting, to send what queued meanwhile:
        the threads whose calls were done woke as they were answered, not by
        taking the sender lock in turn (which kept a done caller waiting behind
        the next round trip)."""
        try:
            head = self._waiting[0]
        except IndexError:
            return
        head.open()

    def close(self) -> None:
        with self._lock:
            self._drop_connection()

    # -- under the lock ---------------------------------------------------
    def _round_trip(self) -> None:
        batch: list[_Call] = []
        while self._waiting and len(batch) < MOST_PER_ROUND_TRIP:
            batch.append(self._waiting.popleft())
        self.round_trips += 1
        try:
            self._send(batch)
        except BaseException as error:
            # Whatever stopped the round trip answers every call of it that
            # has no reply yet, each with an exception of its own; a call
            # whose reply was read keeps it (it ran: failing it would invite
            # a re-enqueue). The connection goes: replies may still be on
            # their way, which the next round trip would read as its own.
            # KeyboardInterrupt and the like go on up.
            self._drop_connection()
            for call in batch:
                if not call.answered:
                    call.error = _own_copy(error)
            if not isinstance(error, Exception):
                raise
        finally:
            for call in batch:
                call.done = True
                call.open()

    def _send(self, batch: list[_Call]) -> None:
        sock = self._ready_socket()  # raises before anything is sent: nothing ran
        todo = batch
        for attempt in (1, 2):  # the second: the calls that certainly did not run
            self._exchange(sock, todo)
            todo = [call for call in todo if isinstance(call.error, NOT_RUN)]
            readonly = any(isinstance(call.error, redis.ReadOnlyError) for call in todo)
            if not todo or attempt == 2:
                if readonly:
                    self._drop_connection()  # the next round trip asks for the primary again
                return
            for call in todo:
                call.error, call.answered = None, False
            sock = self._reload(sock, readonly)

    def _reload(self, sock: socket.socket, readonly: bool) -> socket.socket:
        """Before sending again the calls that did not run: a new connection if
        one met READONLY (a demoted primary: the new one asks the sentinels
        where the primary is now), and the script loaded on the connection."""
        if readonly:
            self._drop_connection()
            sock = self._ready_socket()
        load = _Call(_packed(self._packer, ("SCRIPT", "LOAD", self._script.script)))
        try:
            self._exchange(sock, [load])
        except LostReply as error:  # the calls left were not sent again: none ran
            raise redis.ConnectionError(f"loading the push script: {error}") from error
        if load.error is not None:
            raise load.error
        return sock

    def _exchange(self, sock: socket.socket, calls: list[_Call]) -> None:
        """One write of every call, then their replies in order (hiredis's reader
        on the socket: none of redis-py's per-command layers)."""
        reader = self._reader
        try:
            sock.sendall(b"".join(call.packed for call in calls))
            for call in calls:
                reply = reader.gets()
                while reply is False:
                    chunk = sock.recv(READ_SIZE)
                    if not chunk:
                        raise redis.ConnectionError("Redis closed the connection")
                    reader.feed(chunk)
                    reply = reader.gets()
                if isinstance(reply, ReplyError):  # this call's own error reply
                    call.error = BaseParser.parse_error(str(reply))  # type: ignore[no-untyped-call]
                else:
                    call.reply = reply
                call.answered = True
        except (redis.ConnectionError, OSError, hiredis.ProtocolError) as error:
            self._drop_connection()
            raise LostReply(
                f"{type(error).__name__}: {error}: the push was sent but its reply was "
                "lost, so it may have run; it is not re-sent, as that could enqueue it twice"
            ) from error

    def _ready_socket(self) -> socket.socket:
        """Our connection's socket, connected and idle. One found readable
        before we write (the server closed it: a restart, an idle timeout; or
        bytes nobody asked for) is replaced: nothing was sent on it, so
        nothing is lost or doubled."""
        conn = self._conn
        if conn is not None and self._poll is not None and self._poll.poll(0):
            self._drop_connection()
            conn = None
        if conn is None:
            conn = self._pool.connection_class(**self._pool.connection_kwargs)
            conn.connect()  # redis-py's handshake: TLS, AUTH, SELECT, Sentinel
            self._conn = conn
            self._reader = hiredis.Reader(replyError=ReplyError)
            self._poll = select.poll()
            self._poll.register(conn._sock, select.POLLIN | select.POLLPRI)
        sock: socket.socket = conn._sock
        return sock

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
        self._conn = self._poll = None


class ReplyError(Exception):
    """An error reply, as hiredis's reader hands it over (turned into redis-py's
    own exception class by ``BaseParser.parse_error``)."""


def _fallback_packer() -> Any:
    from redis._parsers.encoders import Encoder
    from redis.connection import PythonRespSerializer

    return PythonRespSerializer(2**16, Encoder("utf-8", "strict", False).encode)  # type: ignore[no-untyped-call]


def _packed(packer: Any, words: tuple[Any, ...]) -> bytes:
    return _pack(words) if _pack is not None else b"".join(packer.pack(*words))


def _own_copy(error: BaseException) -> BaseException:
    """An exception of its own for each caller: one instance raised in several
    threads at once would share (and overwrite) its traceback."""
    if isinstance(error, LostReply):
        copy: BaseException = LostReply(*error.args)
    elif isinstance(error, redis.RedisError):
        copy = type(error)(*error.args)
    elif isinstance(error, Exception):
        copy = redis.RedisError(f"{type(error).__name__}: {error}")
    else:
        copy = LostReply(f"the round trip was interrupted ({type(error).__name__}): {error}")
    copy.__cause__ = error
    return copy
