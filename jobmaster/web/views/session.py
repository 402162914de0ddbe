"""``/login`` and ``/logout`` (only useful with web_password or web_token set).

The login form has a CSRF token like every other form: without it, another
site could log a visitor into a session of its choosing.
"""

from __future__ import annotations

import math

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from jobmaster.web import csrf
from jobmaster.web.dashboard import dashboard
from jobmaster.web.routing import base, render, to


def _next(request: Request, value: object) -> str:
    """Where to go after logging in: a path of this app only (no open redirect)."""
    target = str(value or "")
    prefix = base(request) + "/"
    if target.startswith(prefix) and not target.startswith("//"):
        return target
    return to(request, "/")


async def login(request: Request) -> Response:
    if request.method == "GET":
        return render(request, "login.html", next=request.query_params.get("next", ""))
    form = await request.form()
    if not csrf.valid(request.session, form.get(csrf.FIELD)):
        return PlainTextResponse("refused: missing or wrong CSRF token", status_code=403)
    guard = dashboard(request).guard
    wait = guard.wait(request)
    if wait:
        seconds = math.ceil(wait)
        return PlainTextResponse(
            f"too many wrong passwords from your address: try again in {seconds} s",
            status_code=429,
            headers={"retry-after": str(seconds)},
        )
    if not guard.accepts(request, str(form.get("password", ""))):
        return render(request, "login.html", status_code=401, next=form.get("next", ""), wrong=True)
    await run_in_threadpool(guard.log_in, request)
    return RedirectResponse(_next(request, form.get("next")), status_code=303)


async def logout(request: Request) -> Response:
    form = await request.form()
    if not csrf.valid(request.session, form.get(csrf.FIELD)):
        return PlainTextResponse("refused: missing or wrong CSRF token", status_code=403)
    await run_in_threadpool(dashboard(request).guard.log_out, request)  # the cookie is dead
    return RedirectResponse(to(request, "/login"), status_code=303)


ROUTES = [
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
]
