"""Pages and actions: every route goes through ``page`` or ``action``.

Both check the guard first (auth.py). An action is a POST from an HTML form:
its CSRF token is checked before anything else (403 without it), the
handler runs in a thread (Redis calls block) and returns a message and the
path to go back to; the answer is a 303 redirect there, the message shown
once on the next page (POST, redirect, GET: a reload never repeats it).
So every action works with JavaScript off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from jobmaster.web import csrf
from jobmaster.web.dashboard import dashboard

PageHandler = Callable[[Request], Response]
ActionHandler = Callable[[Request, FormData], "tuple[str, str]"]  # (message, path)
FLASH = "flash"


def base(request: Request) -> str:
    """The mount prefix ('' when served alone): every link starts with it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def to(request: Request, path: str, **query: Any) -> str:
    """A URL of this app: the prefix, the path, the non-empty query parameters."""
    params = {k: v for k, v in query.items() if v not in (None, "")}
    return base(request) + path + (f"?{urlencode(params)}" if params else "")


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    board = dashboard(request)
    context |= {
        "request": request,
        "base": base(request),
        "csrf_token": csrf.token(request.session),
        "flash": request.session.pop(FLASH, None),
        "login_required": board.guard.required,
        # Where Redis is (host, port, user) is for logged-in eyes only.
        "redis": board.config.redis_url_masked if _allowed(request) else "",
    }
    return board.templates.TemplateResponse(request, template, context, status_code=status_code)


def _allowed(request: Request) -> bool:
    """Whether this request got past the guard (``page`` and ``action`` record it)."""
    return not dashboard(request).guard.required or getattr(request.state, "allowed", False)


async def _let_in(request: Request) -> bool:
    """The guard's verdict (it reads Redis: in a thread), recorded for ``render``."""
    allowed = await run_in_threadpool(dashboard(request).guard.allows, request)
    request.state.allowed = allowed
    return allowed


def _login_redirect(request: Request) -> Response:
    if request.url.path.endswith(".json") or request.method != "GET":
        return PlainTextResponse("login required", status_code=401)
    return RedirectResponse(to(request, "/login", next=request.url.path), status_code=303)


def _token_login(request: Request) -> Response:
    """The link ``jobmaster web`` prints (``?token=``): log in, then the same page
    without the token, so it stays out of the history and the Referer."""
    dashboard(request).guard.log_in(request)
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    query = f"?{urlencode(params)}" if params else ""
    return RedirectResponse(request.url.path + query, status_code=303)


def page(path: str, handler: PageHandler, name: str | None = None) -> Route:
    async def endpoint(request: Request) -> Response:
        if not await _let_in(request):
            link = request.query_params.get("token")
            if dashboard(request).guard.accepts_token(request, link):
                return await run_in_threadpool(_token_login, request)
            return _login_redirect(request)
        return await run_in_threadpool(handler, request)

    return Route(path, endpoint, methods=["GET"], name=name or handler.__name__)


def action(path: str, handler: ActionHandler, name: str | None = None) -> Route:
    async def endpoint(request: Request) -> Response:
        if not await _let_in(request):
            return _login_redirect(request)
        form = await request.form()
        submitted = form.get(csrf.FIELD) or request.headers.get(csrf.HEADER)
        if not csrf.valid(request.session, submitted):
            return PlainTextResponse(
                "refused: missing or wrong CSRF token (reload the page)", status_code=403
            )
        message, back = await run_in_threadpool(handler, request, form)
        if message:
            request.session[FLASH] = message
        return RedirectResponse(to(request, back), status_code=303)

    return Route(path, endpoint, methods=["POST"], name=name or handler.__name__)


def json_page(path: str, handler: Callable[[Request], Any]) -> Route:
    """A JSON endpoint for the page's live refresh (GET: no CSRF needed)."""

    def respond(request: Request) -> Response:
        return JSONResponse(handler(request), headers={"cache-control": "no-store"})

    return page(path, respond, name=handler.__name__)
