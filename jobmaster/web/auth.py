"""Who may use the dashboard: anyone on loopback by default, else a password or token.

- ``web_password``: typed once in the login page; the signed session cookie
  then carries a session id (the password itself is never stored in it).
- ``web_token``: for scripts, ``Authorization: Bearer TOKEN`` on each request;
  it opens the login page too, and so does a link ending in ``?token=TOKEN``.
  ``"auto"`` makes a random one per app, which ``jobmaster web`` prints in
  that link at start (as Jupyter does): the way to keep the other users of
  a shared host out of a loopback dashboard.

A session counts only while its id is in Redis (``keys.web_session``, with
the cookie's lifetime as TTL): the cookie is signed but kept by the
browser, so without this a cookie copied before a logout still worked for
its 12 hours; logout deletes the id. Wrong guesses are throttled per client
address (throttle.py).

With neither set there is nothing to check: ``jobmaster web`` then refuses
to listen anywhere but on loopback (commands/web.py), so the open dashboard
is reachable only from the machine itself, by every local user.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field

import redis
from starlette.requests import Request

from jobmaster.keys import Keys
from jobmaster.web.throttle import Throttle

SESSION_ID = "sid"
SESSION_SECONDS = 12 * 3600  # the cookie's max age, and its server-side record's TTL
AUTO = "auto"  # web_token = "auto": a random token per app


def resolve_token(configured: str) -> str:
    """The token in force: as configured, or a fresh random one for ``"auto"``."""
    return secrets.token_urlsafe(32) if configured.strip().lower() == AUTO else configured


def _same(secret: str, candidate: str) -> bool:
    return bool(secret) and hmac.compare_digest(secret.encode(), candidate.encode())


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


@dataclass(frozen=True)
class Sessions:
    """The logged-in sessions, server side (blocking Redis calls: not on the event loop)."""

    redis: redis.Redis
    keys: Keys

    def open(self) -> str:
        sid = secrets.token_urlsafe(24)
        self.redis.set(self.keys.web_session(sid), 1, ex=SESSION_SECONDS)
        return sid

    def live(self, sid: object) -> bool:
        # A cookie is signed, but bound the id anyway before it names a key.
        if not isinstance(sid, str) or not 0 < len(sid) <= 64:
            return False
        return bool(self.redis.exists(self.keys.web_session(sid)))

    def close(self, sid: object) -> None:
        if isinstance(sid, str) and 0 < len(sid) <= 64:
            self.redis.delete(self.keys.web_session(sid))


@dataclass(frozen=True)
class Guard:
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    sessions: Sessions | None = None  # needed once a password or token is set
    throttle: Throttle = field(default_factory=Throttle)

    @property
    def required(self) -> bool:
        return bool(self.password or self.token)

    def wait(self, request: Request) -> float:
        """Seconds before this client may guess again (0: now)."""
        return self.throttle.wait(client_address(request))

    def accepts(self, request: Request, candidate: str) -> bool:
        """A login with the password (or the token); a wrong one is counted.
        The caller checks ``wait`` first."""
        right = _same(self.password, candidate) or _same(self.token, candidate)
        self._count(request, right)
        return right

    def accepts_token(self, request: Request, candidate: str | None) -> bool:
        """The token of a login link (``?token=``), throttled like a login."""
        if candidate is None or self.wait(request):
            return False
        right = _same(self.token, candidate)
        self._count(request, right)
        return right

    def allows(self, request: Request) -> bool:
        """A live session, or the bearer token (blocking: reads Redis)."""
        if not self.required:
            return True
        if self.sessions is not None and self.sessions.live(request.session.get(SESSION_ID)):
            return True
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or self.wait(request):
            return False
        right = _same(self.token, credentials.strip())
        self._count(request, right)
        return right

    def log_in(self, request: Request) -> None:
        """A fresh session (and CSRF token), recorded server side: a session
        planted before the login is not the one that ends up logged in."""
        request.session.clear()
        if self.sessions is not None:
            request.session[SESSION_ID] = self.sessions.open()

    def log_out(self, request: Request) -> None:
        if self.sessions is not None:
            self.sessions.close(request.session.get(SESSION_ID))
        request.session.clear()

    def _count(self, request: Request, right: bool) -> None:
        who = client_address(request)
        if right:
            self.throttle.succeeded(who)
        else:
            self.throttle.failed(who)
