"""Middleware: code around enqueue (client side) and around execution (server side).

Subclass ``Middleware`` and override the hooks you need (each is a no-op by
default); add it for every job with ``jobmaster.middleware.add(...)`` or the
config's ``middleware = ["myapp.mw:Audit"]``, or for one job with
``@job(middleware=[...])``. A hook that raises is logged and the job goes on,
except ``Defer``, which a server hook raises to hold the job back.
"""

from jobmaster.middleware.base import (
    Defer,
    JobContext,
    Middleware,
    add,
    clear,
    installed,
    load,
)
from jobmaster.middleware.rate_limit import RateLimit
from jobmaster.middleware.without_overlapping import WithoutOverlapping

__all__ = [
    "Defer",
    "JobContext",
    "Middleware",
    "RateLimit",
    "WithoutOverlapping",
    "add",
    "clear",
    "installed",
    "load",
]
