"""The producer side: pushing jobs into Redis.

``Client.push`` and ``Client.push_bulk`` take plain dicts (job name, args,
queue...) so a producer can enqueue jobs it does not import; the job API
(job.py) builds on them. This module imports nothing from the worker or
supervisor side.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from jobmaster import crypto, environment, results
from jobmaster import payload as wire
from jobmaster import push_plans as plans
from jobmaster.connection import connect
from jobmaster.keys import Keys
from jobmaster.push_plans import PushPlans
from jobmaster.pusher import Pusher
from jobmaster.queue_names import queue_name
from jobmaster.redis_target import DEFAULT_URL, RedisTarget, mask_url
from jobmaster.scripts import Scripts

if TYPE_CHECKING:
    from jobmaster.config import Config

DEFAULT_STATUS_TTL = 86400.0
log = logging.getLogger("jobmaster.client")
PUSH_FIELDS = {"job", "args", "kwargs", "queue", "retry", "at"}


class Client(PushPlans):
    """Pushes jobs to one Redis and namespace."""

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        namespace: str = "jobmaster",
        data_dir: str | Path = ".jobmaster",
        connection: redis.Redis | None = None,
        status_ttl: float = DEFAULT_STATUS_TTL,
        target: RedisTarget | None = None,
    ) -> None:
        if connection is None:
            target = target or RedisTarget(
                url=redis_url or environment.redis_url(), data_dir=str(data_dir)
            )
            connection = connect(target)
        self.redis = connection
        # Where ``connection`` leads, when known: the ``a*`` calls open their
        # asyncio connections there (aio/client.py); None for a connection
        # made by the caller.
        self.target = target
        self.keys = Keys(namespace)
        self.scripts = Scripts(self.redis)
        self.status_ttl = round(status_ttl)  # 0: status tracking off
        # One-queue pushes go through the lean path (pusher.py): one EVALSHA
        # on a connection of its own, shared by threads pushing at once. A
        # client built on something else than redis-py's own client keeps
        # redis-py's Script path.
        self.pusher = (
            Pusher(self.redis, self.scripts.push) if type(self.redis) is redis.Redis else None
        )

    @classmethod
    def from_config(cls, config: Config) -> Client:
        """A client on the config's Redis (URL, credentials, TLS or Sentinel) and
        namespace, keeping job statuses as its workers do."""
        target = RedisTarget.of(config)
        return cls(
            connection=connect(target),
            target=target,
            namespace=config.namespace,
            status_ttl=config.status_ttl if config.track_status else 0.0,
        )

    # -- dict API, for producers that don't import the job ---------------
    def push(self, item: Mapping[str, Any]) -> str | None:
        """Enqueue one job from ``{"job", "args", "kwargs", "queue", "retry", "at"}``.

        Other keys are copied into the payload. Returns the jid (None if a
        client middleware dropped the job).
        """
        payload = self._payload_from_item(item, item.get("args", []), item.get("kwargs", {}))
        pushed = self.push_payloads([payload], at=item.get("at"))
        return str(pushed[0]["jid"]) if pushed else None

    def push_bulk(self, item: Mapping[str, Any]) -> list[str]:
        """Enqueue many jobs of one kind: ``item["args"]`` is a list of argument lists.

        One round trip per 1,000 jobs. ``item["kwargs"]``, if given, is applied to
        every job.
        """
        arg_lists = item.get("args")
        if not isinstance(arg_lists, list | tuple) or not all(
            isinstance(args, list | tuple) for args in arg_lists
        ):
            raise TypeError("push_bulk: 'args' must be a list of argument lists")
        kwargs = item.get("kwargs", {})
        payloads = [self._payload_from_item(item, args, kwargs) for args in arg_lists]
        return [str(p["jid"]) for p in self.push_payloads(payloads, at=item.get("at"))]

    def _payload_from_item(
        self, item: Mapping[str, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> dict[str, Any]:
        job = item.get("job")
        if not isinstance(job, str) or not job:
            raise TypeError("push: 'job' must be the job's registered name (a string)")
        if not isinstance(args, list | tuple):
            raise TypeError(f"{job}: 'args' must be a list")
        if not isinstance(kwargs, Mapping):
            raise TypeError(f"{job}: 'kwargs' must be a dict")
        queue = item.get("queue", "default")
        try:
            queue_name(queue)  # the config's rule: a queue no worker can name is refused here
        except ValueError as error:
            raise ValueError(f"{job}: 'queue' {error}") from None
        extra = {k: v for k, v in item.items() if k not in PUSH_FIELDS}
        wire.check_json(extra, f"{job}: extra fields")
        if "retry" in item:
            # Without it the worker applies the job's own ``retry`` option: a
            # producer that doesn't import the job shouldn't override it.
            extra["retry"] = item["retry"]
        return wire.build(job, args, kwargs, queue=queue, extra=extra)

    # -- payloads, for the job API ---------------------------------------
    def push_payloads(
        self,
        payloads: Iterable[dict[str, Any]],
        at: float | None = None,
        pipe: redis.client.Pipeline | None = None,
    ) -> list[dict[str, Any]]:
        """Push built payloads now, or into the scheduled set if ``at`` is in the
        future, after the client middleware; returns the payloads pushed.

        ``pipe``: a MULTI pipeline holding other commands that must happen
        with the push (a chain's hash), for a push now; it is executed with the
        push, and not at all if the client middleware dropped every payload."""
        batch = plans.before_push(payloads)
        if not batch:
            return []
        due = plans.due(at)
        try:
            if due is not None:
                schedule = self.redis.pipeline(transaction=True)
                self.schedule_into(schedule, batch, due)
                schedule.execute()
            else:
                self._push_now(batch, pipe)
        except redis.RedisError as error:
            raise plans.enqueue_error(batch, error) from error
        return batch

    def push_unique(self, payload: dict[str, Any], ttl: int, at: float | None = None) -> bool:
        """Push one unique job unless a job holds its lock (see unique.py); True if pushed."""
        call = self.unique_call(payload, ttl, at)
        if call is None:
            return False
        try:
            return bool(call.run(self.scripts.push_unique))
        except redis.RedisError as error:
            raise plans.enqueue_error([payload], error) from error

    def _push_now(
        self, payloads: list[dict[str, Any]], pipe: redis.client.Pipeline | None = None
    ) -> None:
        calls = self.grouped(payloads)
        if len(calls) == 1 and pipe is None:
            self._push_one_queue(*calls[0])
            return
        queues = list(dict.fromkeys(queue for queue, _ in calls))
        if len(queues) > 1 or pipe is not None:
            # One round trip, off the one-queue path (PushPlans.check_types_into).
            check = self.redis.pipeline(transaction=False)
            self.check_types_into(check, queues)
            self.wrong_type(queues, check.execute())
        pipe = pipe or self.redis.pipeline(transaction=False)
        for queue, chunk in calls:
            self.push_call(queue, chunk).run(self.scripts.push, client=pipe)
        pipe.execute()

    def _push_one_queue(self, queue: str, chunk: list[dict[str, Any]]) -> None:
        call = self.push_call(queue, chunk)
        if self.pusher is not None:
            self.pusher.run(call.keys(), call.argv())
        else:
            call.run(self.scripts.push)

    # -- what became of a job ---------------------------------------------
    def status(self, jid: str) -> str | None:
        """queued, scheduled, working, retrying, complete, failed, dead; None if
        unknown or expired (kept status_ttl seconds after its last change)."""
        return results.status(self.redis, self.keys, jid)

    def attempts(self, jid: str) -> list[dict[str, Any]]:
        """The newest attempts (``results.ATTEMPTS_READ``), oldest first, each with
        started_at, ended_at, outcome, error_class, error_message and worker,
        read tolerant of forged entries (results.attempts)."""
        return results.attempts(self.redis, self.keys, jid)

    def result(self, jid: str, wait: float = 0) -> Any:
        """The job's return value once it is complete, waiting up to ``wait`` seconds
        (on a pub/sub message, not by polling; see results.py).

        Raises ``JobFailed`` if it ended dead, failed, cancelled or expired,
        ``ResultPending`` if it has not ended in time, ``UnknownJob`` if no
        status is kept for ``jid``.
        """
        return results.wait_for(self.redis, self.keys, jid, wait)


# -- the default client used by the job API ------------------------------
_default: Client | None = None
_default_lock = threading.Lock()


def configure(
    redis_url: str | None = None,
    *,
    namespace: str | None = None,
    config: str | os.PathLike[str] | None = None,
    secret_key: str | Sequence[str] | None = None,
) -> Client:
    """Set where ``job.enqueue`` pushes: a URL, or the same config file the workers use.

    With ``config``, the file's Redis settings (URL, credentials, TLS,
    Sentinel), ``namespace`` and ``data_dir`` apply (so ``redis_url =
    "embedded"`` reaches the workers' embedded Redis); explicit arguments win.
    ``secret_key`` (else the file's) seals ``encrypt=True`` jobs.
    """
    global _default
    connection: redis.Redis | None = None
    target: RedisTarget | None = None
    status_ttl = DEFAULT_STATUS_TTL
    if config is not None:
        from jobmaster.config import load_config  # config pulls in the whole settings table

        loaded = load_config(config)
        target = RedisTarget.of(loaded)
        target = replace(target, url=redis_url) if redis_url else target
        connection = connect(target)
        namespace = namespace or loaded.namespace
        status_ttl = loaded.status_ttl if loaded.track_status else 0.0
        secret_key = loaded.secret_key if secret_key is None else secret_key
    if secret_key is not None:
        crypto.set_keys(secret_key)
    if redis_url is None and namespace is None and config is None:
        # Only keys were given: keep (or lazily make) the client in place
        # rather than quietly replacing it with one built from the environment.
        return default_client()
    client = Client(
        redis_url,
        namespace=namespace or "jobmaster",
        connection=connection,
        status_ttl=status_ttl,
        target=target,
    )
    with _default_lock:
        _default = client
    return client


def default_from_config(config: Config) -> None:
    """Make the workers' own Redis (credentials, TLS, Sentinel) the default client,
    so that a job enqueueing jobs reaches it, not the one the environment names.

    Called before the app is imported: an app that calls ``configure`` at
    import time replaces it, and that choice wins.
    """
    global _default
    client = Client.from_config(config)  # lazy: nothing is sent to Redis yet
    with _default_lock:
        if _default is None:
            _default = client


def status(jid: str) -> str | None:
    """The job's status through the default client: queued, scheduled, working,
    retrying, complete, failed, dead; None if unknown or expired."""
    return default_client().status(jid)


def attempts(jid: str) -> list[dict[str, Any]]:
    """The job's attempts through the default client, oldest first."""
    return default_client().attempts(jid)


def result(jid: str, wait: float = 0) -> Any:
    """The job's return value through the default client (see ``Client.result``)."""
    return default_client().result(jid, wait)


def default_client() -> Client:
    """The configured client, created from the environment on first use.

    That fallback says once where it connects: a producer that forgot
    ``configure(config=...)`` while its workers use the embedded Redis
    (or another server) talked to 127.0.0.1:6379 without a word, which
    may be someone else's Redis. A WARNING for the built-in default (shown
    even where logging is not set up), INFO for a URL from the environment.
    """
    global _default
    with _default_lock:
        if _default is None:
            found = environment.env_value(environment.REDIS_URL_VARS)
            url = found[1] if found else DEFAULT_URL
            _default = Client(url)
            log.log(
                logging.INFO if found else logging.WARNING,
                "no jobmaster.configure(...) call: producing to Redis at %s (%s); "
                'configure(config="jobmaster.toml") reaches the workers\' Redis, '
                "an embedded one included",
                mask_url(url),
                f"from {found[0]}" if found else "the default: JOBMASTER_REDIS_URL is not set",
            )
        return _default
