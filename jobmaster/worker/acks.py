"""Acknowledgements of jobs that end at the same moment, sent in one round trip.

With short jobs, several processor threads finish within the same
millisecond, and each FINISH is a round trip of its own: the threads queue on
the connection pool and on the GIL to send what one pipeline could carry.
Here, the first thread to reach the send lock sends every FINISH queued by
then as one pipeline (one round trip); the others find their reply waiting.

Nothing about a FINISH changes: each is its own script call (atomic on its
own), its reply goes to the thread that asked, and a connection error fails
every call of the round trip alike, since any of them may have run: each
thread's ``record`` then re-sends its own with the "resent" guard, exactly
as after a lost reply of a single call.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script


class Call:
    """One script call waiting for the round trip that carries it."""

    __slots__ = ("args", "done", "error", "keys", "reply", "script")

    def __init__(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> None:
        self.script = script
        self.keys = keys
        self.args = args
        self.done = False
        self.reply: Any = None
        self.error: BaseException | None = None

    def settle(self, reply: Any) -> None:
        if isinstance(reply, BaseException):
            self.error = reply
        else:
            self.reply = reply
        self.done = True


class Acks:
    """Sends the script calls of the threads of one process, combined."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._send_lock = threading.Lock()  # one round trip at a time
        self._queue_lock = threading.Lock()
        self._queued: list[Call] = []

    def call(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``script(keys, args)``, possibly in the same round trip as other threads'."""
        call = Call(script, keys, args)
        with self._queue_lock:
            self._queued.append(call)
        with self._send_lock:
            if not call.done:
                with self._queue_lock:
                    calls, self._queued = self._queued, []
                self._send(calls)
        if call.error is not None:
            raise call.error
        return call.reply

    def _send(self, calls: list[Call]) -> None:
        if len(calls) == 1:
            only = calls[0]
            try:
                only.settle(only.script(keys=only.keys, args=only.args, client=self.client))
            except redis.RedisError as error:
                only.settle(error)
            return
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as error:
            for call in calls:
                call.settle(error)
            return
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError):
                # A Redis restarted (or replaced) since the script was loaded:
                # the call did not run; Script loads it and calls again.
                self._send([call])
            else:
                call.settle(reply)
