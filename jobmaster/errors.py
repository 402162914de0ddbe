"""Exceptions that users and operators see.

Each one carries a message meant to be printed as one readable line: the CLI
prints ``str(error)`` without a traceback (unless ``--debug``).
"""

from __future__ import annotations


class JobmasterError(Exception):
    """Base class of every error jobmaster raises on purpose."""


class ConfigError(JobmasterError):
    """A setting is unknown, of the wrong type or impossible (exit code 2)."""


class RedisVersionError(JobmasterError):
    """The Redis server is older than the 6.2 that LMOVE and our scripts need."""


class EnqueueError(JobmasterError):
    """A job could not be pushed (Redis refused or is unreachable)."""


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
