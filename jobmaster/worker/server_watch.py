"""Noticing that the Redis behind a worker restarted, or was replaced by an empty one.

A Redis without persistence restarts empty, and a managed Redis may fail
over to a replica that missed the latest writes, or be swapped for a new
instance: every queue, in-progress list and registration is gone while the
workers carry on. Workers cope by themselves (the heartbeat re-registers,
scripts are reloaded on NOSCRIPT, fetches find the new jobs), but nothing
can bring the lost jobs back, so operators must hear of it.

The heartbeat reports, at each beat, whether this process was still
registered (its SADD to the set of processes added nothing). A registration
that vanished is the sign; the server's ``run_id`` (``INFO server``) tells a
new server from the same one emptied, or from our own heartbeat having
expired (another process then recovered our jobs and forgot us). ``run_id``
is read only when it can have changed: at the first beat, after a beat that
failed, and when the registration vanished, so a steady beat costs nothing.
"""

from __future__ import annotations

import logging

import redis

log = logging.getLogger("jobmaster.worker.server_watch")


class ServerWatch:
    def __init__(self, client: redis.Redis, shown_url: str) -> None:
        self.client = client
        self.shown_url = shown_url  # the URL with its password masked
        self.run_id: str | None = None
        self._look = True  # read run_id at the next beat

    def beat_failed(self) -> None:
        """A beat did not reach Redis: the server may be another one by the next beat."""
        self._look = True

    def beat_done(self, was_registered: bool) -> None:
        """A beat (re-)registered this process; ``was_registered``: it already was.

        Raises ``redis.RedisError`` if ``INFO`` fails; the next beat looks again.
        """
        if was_registered and not self._look:
            return
        previous = self.run_id
        self.run_id = str(self.client.info("server").get("run_id", "?"))
        self._look = False
        if previous is None:
            return  # our first beat: not registered yet, nothing to compare with
        if not was_registered and previous != self.run_id:
            log.warning(
                "Redis at %s was replaced or emptied (run_id %s -> %s): this process's "
                "registration was gone; jobs queued or in flight before it may be lost; "
                "re-registering",
                self.shown_url,
                previous,
                self.run_id,
            )
        elif not was_registered:
            log.warning(
                "this process's registration vanished from Redis at %s (same server, run_id %s): "
                "its data was flushed, or our heartbeat expired and another process recovered "
                "our jobs; re-registering",
                self.shown_url,
                self.run_id,
            )
        elif previous != self.run_id:
            log.info(
                "Redis at %s restarted (run_id %s -> %s) and kept its data",
                self.shown_url,
                previous,
                self.run_id,
            )
