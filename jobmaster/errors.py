"""Exceptions that users and operators see.

Each one carries a message meant to be printed as one readable line: the CLI
prints ``str(error)`` without a traceback (unless ``--debug``).
"""

from __future__ import annotations

from redis import exceptions as redis_errors


class JobmasterError(Exception):
    """Base class of every error jobmaster raises on purpose."""


class ConfigError(JobmasterError):
    """A setting is unknown, of the wrong type or impossible (exit code 2)."""


class NotFound(JobmasterError):
    """What a command names (a jid, an entry, a batch, a process) does not
    exist, or no longer (exit code 6)."""


class Refused(JobmasterError):
    """Understood, but refused as things stand: a cancel of an ended job, an
    enqueue of a job no worker registers (exit code 7)."""


class RedisVersionError(JobmasterError):
    """The Redis server is older than the 6.2 that LMOVE and our scripts need."""


class RedisPermissionError(JobmasterError, redis_errors.NoPermissionError):
    """Redis refused a command to this ACL user (NOPERM): which key, channel or
    command, and the grant that is missing. Never read as "absent": a
    result the user may not read is not "no result" (SPEC §8). Still a
    redis ``NoPermissionError`` for code that catches that."""

    def __init__(self, what: str, grant: str, reply: str) -> None:
        super().__init__(
            f"Redis refused {what} to this user ({reply}): its ACL needs {grant} "
            "(see the producer's recipe in docs/redis-deployment.md)"
        )
        self.what, self.grant = what, grant


class EnqueueError(JobmasterError):
    """A job could not be pushed (Redis refused or is unreachable)."""


class EnqueueUnconfirmed(EnqueueError):
    """The push was sent but its reply was lost: the jobs (``jids``) may or may
    not be enqueued. Never re-sent by jobmaster, since a push that ran would
    then be enqueued twice; their status says which (when status tracking is
    on: ``queued`` once they landed)."""

    def __init__(self, message: str, jids: list[str]) -> None:
        super().__init__(message)
        self.jids = jids


class Permanent(Exception):
    """Raise from a job to skip its retries: it goes to the dead set at once."""


class JobTimeout(BaseException):
    """Raised inside a job's thread when it runs past its ``timeout``.

    A ``BaseException``, like ``KeyboardInterrupt``: job code's own
    ``except Exception`` (a retry loop, a "log and carry on") would otherwise
    swallow it, and the job would run on past its timeout to an end.
    """


class JobCancelled(BaseException):
    """Raised inside a running job's thread after ``jobmaster.cancel(jid)``.

    A ``BaseException`` for the reason JobTimeout is one: a job's own
    ``except Exception`` must not swallow the cancel and run on to an end.
    The job ends with status ``cancelled``: not retried, not dead.
    """


class PoisonPill(Exception):
    """The error an ``on_failure`` hook gets for a job that kept killing (or
    bloating) its worker process and was buried without running to an end."""


class JobFailed(JobmasterError):
    """``jobmaster.result``: the job ended without a result (``dead``, ``failed``,
    ``cancelled``, ``expired``, ``skipped``).

    ``error_class`` and ``error_message`` say why, as its last attempt or its
    dead-set entry recorded it; None where nothing was recorded (a cancelled
    or expired job never raised).
    """

    def __init__(
        self,
        jid: str,
        status: str,
        error_class: str | None = None,
        error_message: str | None = None,
    ) -> None:
        self.jid = jid
        self.status = status
        self.error_class = error_class
        self.error_message = error_message
        why = ": ".join(part for part in (error_class, error_message) if part)
        super().__init__(f"job {jid} ended {status}" + (f" ({why})" if why else ""))


class ResultPending(JobmasterError, TimeoutError):
    """``jobmaster.result``: the job has not ended within ``wait`` seconds.

    A ``TimeoutError``, so code that already handles timeouts handles it.
    """

    def __init__(self, jid: str, status: str, waited: float) -> None:
        self.jid = jid
        self.status = status
        self.waited = waited
        super().__init__(f"job {jid} is still {status} after {waited:g} s")


class UnknownJob(JobmasterError, LookupError):
    """``jobmaster.result``: no status is kept for this jid (never enqueued here,
    its status expired after ``status_ttl``/``result_ttl``, or status tracking is off).
    """

    def __init__(self, jid: str) -> None:
        self.jid = jid
        super().__init__(
            f"no job {jid} is known: never enqueued here, its status and result expired, "
            "or status tracking is off"
        )
