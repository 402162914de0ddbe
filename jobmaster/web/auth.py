"""Who may use the dashboard: anyone on loopback by default, else a password or token.

- ``web_password``: typed once in the login page; the signed session cookie
  then says "logged in" (the password itself is never stored in it).
- ``web_token``: for scripts, ``Authorization: Bearer TOKEN`` on each request;
  it opens the login page too, and so does a link ending in ``?token=TOKEN``.
  ``"auto"`` makes a random one per app, which ``jobmaster web`` prints in
  that link at start (as Jupyter does): the way to keep the other users of
  a shared host out of a loopback dashboard.

With neither set there is nothing to check: ``jobmaster web`` then refuses
to listen anywhere but on loopback (commands/web.py), so the open dashboard
is reachable only from the machine itself, by every local user.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field

from starlette.requests import Request

SESSION_FLAG = "authenticated"
AUTO = "auto"  # web_token = "auto": a random token per app


def resolve_token(configured: str) -> str:
    """The token in force: as configured, or a fresh random one for ``"auto"``."""
    return secrets.token_urlsafe(32) if configured.strip().lower() == AUTO else configured


def _same(secret: str, candidate: str) -> bool:
    return bool(secret) and hmac.compare_digest(secret.encode(), candidate.encode())


@dataclass(frozen=True)
class Guard:
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)

    @property
    def required(self) -> bool:
        return bool(self.password or self.token)

    def accepts(self, candidate: str) -> bool:
        """A login with the password (or the token)."""
        return _same(self.password, candidate) or _same(self.token, candidate)

    def accepts_token(self, candidate: str | None) -> bool:
        """The token of a login link (``?token=``)."""
        return candidate is not None and _same(self.token, candidate)

    def allows(self, request: Request) -> bool:
        if not self.required or request.session.get(SESSION_FLAG) is True:
            return True
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and _same(self.token, credentials.strip())


def log_in(request: Request) -> None:
    """A fresh session (and CSRF token), logged in: a session id planted
    before the login is not the one that ends up logged in."""
    request.session.clear()
    request.session[SESSION_FLAG] = True
