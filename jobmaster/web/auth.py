"""Who may use the dashboard: anyone on loopback by default, else a password or token.

- ``web_password``: typed once in the login page; the signed session cookie
  then says "logged in" (the password itself is never stored in it).
- ``web_token``: for scripts, ``Authorization: Bearer TOKEN`` on each request;
  it opens the login page too.

With neither set there is nothing to check: ``jobmaster web`` then refuses
to listen anywhere but on loopback (commands/web.py), so the open dashboard
is reachable only from the machine itself.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from starlette.requests import Request

SESSION_FLAG = "authenticated"


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

    def allows(self, request: Request) -> bool:
        if not self.required or request.session.get(SESSION_FLAG) is True:
            return True
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and _same(self.token, credentials.strip())
