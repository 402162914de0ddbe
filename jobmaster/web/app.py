"""``create_app``: the dashboard as one Starlette app, to serve or to mount.

Middleware, outermost first: the client's address and scheme from
``X-Forwarded-For``/``-Proto``, only when the request comes from a proxy
named in ``web_trusted_proxies`` (uvicorn's ProxyHeadersMiddleware; from
anyone else the headers are ignored, so a local user cannot claim an
address of its choice to escape the login throttle), security headers, the Host check (only the
names the dashboard is known by: DNS rebinding), the Origin check of every
POST (door.py), then the signed session cookie (itsdangerous, via
Starlette) that carries the login flag and the CSRF token. The session key
is random per app unless given: restarting the dashboard logs everyone
out, which is fine for an operator's tool; run
several dashboard processes behind one address only with a shared
``session_secret``.
"""

from __future__ import annotations

import secrets

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from jobmaster.client import Client
from jobmaster.config import Config, load_config
from jobmaster.web.auth import SESSION_SECONDS, Guard, Sessions, resolve_token
from jobmaster.web.dashboard import Dashboard
from jobmaster.web.door import OriginCheck, allowed_hosts
from jobmaster.web.headers import SecureCookies, SecurityHeaders
from jobmaster.web.outage import UNREACHABLE, redis_unreachable
from jobmaster.web.views import batches, jobs, overview, periodic, processes, queues, session, sets

SESSION_COOKIE = "jobmaster_web"


def create_app(
    config: Config | None = None,
    *,
    client: Client | None = None,
    session_secret: str | None = None,
    listen: str | None = None,
) -> Starlette:
    """The dashboard for ``config`` (default: ``load_config()``: env and defaults).

    ``config`` gives the Redis (URL, credentials, TLS, Sentinel), the
    namespace, the dead set's caps, ``web_password``/``web_token`` and
    ``web_hosts``; ``client`` overrides the Redis connection (tests, or an
    app's own client). ``listen``: the address served on, a name requests
    may give in their Host header besides localhost and ``web_hosts`` (a
    dashboard mounted in another app under its own domain lists that domain
    in ``web_hosts``). With ``web_token = "auto"`` the token made is
    ``app.state.dashboard.guard.token``.
    """
    config = config or load_config()
    client = client or Client.from_config(config)
    sessions = Sessions(client.redis, client.keys)
    board = Dashboard(
        client=client,
        config=config,
        guard=Guard(config.web_password, resolve_token(config.web_token), sessions),
    )
    routes: list[BaseRoute] = [
        *overview.ROUTES,
        *processes.ROUTES,
        *queues.ROUTES,
        *sets.ROUTES,
        *periodic.ROUTES,
        *batches.ROUTES,
        *jobs.ROUTES,
        *session.ROUTES,
        Mount("/static", app=StaticFiles(packages=[("jobmaster.web", "static")]), name="static"),
    ]
    middleware = [
        *(
            [Middleware(ProxyHeadersMiddleware, trusted_hosts=config.web_trusted_proxies)]
            if config.web_trusted_proxies
            else []
        ),
        Middleware(SecurityHeaders),
        Middleware(SecureCookies, mode=config.web_cookie_secure),
        Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(listen, config.web_hosts)),
        Middleware(OriginCheck),
        Middleware(
            SessionMiddleware,
            secret_key=session_secret or secrets.token_hex(32),
            session_cookie=SESSION_COOKIE,
            max_age=SESSION_SECONDS,
            same_site="strict",
        ),
    ]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={error: redis_unreachable for error in UNREACHABLE},
    )
    app.state.dashboard = board
    return app
