"""``/login`` and ``/logout`` (only useful with web_password or web_token set).

The login form has a CSRF token like every other form: without it, another
site could log a visitor into a session of its choosing.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from jobmaster.web import csrf
from jobmaster.web.auth import log_in
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
    if not dashboard(request).guard.accepts(str(form.get("password", ""))):
        return render(request, "login.html", status_code=401, next=form.get("next", ""), wrong=True)
    log_in(request)
    return RedirectResponse(_next(request, form.get("next")), status_code=303)


async def logout(request: Request) -> Response:
    form = await request.form()
    if not csrf.valid(request.session, form.get(csrf.FIELD)):
        return PlainTextResponse("refused: missing or wrong CSRF token", status_code=403)
    request.session.clear()
    return RedirectResponse(to(request, "/login"), status_code=303)


ROUTES = [
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
]
