"""A Redis that cannot be reached: a page that says so, status 503.

Every page reads Redis. Without this, each request while Redis is down (a
restart, a failover, a network cut) was a bare 500 and a traceback in the
dashboard's log, which reads as a bug in the dashboard. Now it is one log
line and an answer that names the cause (``Retry-After``; the live refresh
keeps polling and fills the counters in again once Redis answers).
"""

from __future__ import annotations

import logging

import redis
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobmaster.connection import describe_error
from jobmaster.web.dashboard import dashboard
from jobmaster.web.routing import render

log = logging.getLogger("jobmaster.web.outage")

# Sentinel's MasterNotFoundError and a server still loading are ConnectionErrors too.
UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)


async def redis_unreachable(request: Request, error: Exception) -> Response:
    """The exception handler of ``UNREACHABLE``, for every route."""
    board = dashboard(request)
    log.warning(
        "Redis unreachable at %s, answered 503 to %s %s: %s",
        board.config.redis_url_masked,
        request.method,
        request.url.path,
        describe_error(error),
    )
    headers = {"cache-control": "no-store", "retry-after": "5"}
    if request.url.path.endswith(".json"):  # the live refresh: it retries by itself
        return JSONResponse({"error": "Redis is unreachable"}, status_code=503, headers=headers)
    answer = render(request, "unreachable.html", status_code=503)
    answer.headers.update(headers)
    return answer
