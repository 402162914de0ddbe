"""Who may knock: the Host a request names, and the Origin of every POST.

DNS rebinding: a page on ``attacker.example`` whose name then resolves to
127.0.0.1 makes the visitor's browser talk to a loopback dashboard as if it
were that site, with the site's own scripts reading the answers. The
browser still sends ``Host: attacker.example``, so the app answers only for
the names it is known by: the address it listens on, the loopback names,
and ``web_hosts`` (Starlette's TrustedHostMiddleware, 400 otherwise).

A POST must also come from a page of ours: a browser names the page's
origin in ``Origin`` (or at least ``Referer``), and it must be this very
host and port. A request with neither is not a browser's form (curl, a
script with a token): the CSRF token, which only our pages carry, still
guards it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::")  # noqa: S104 - recognised, not bound
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def host_name(address: str) -> str:
    """An address as a Host header names it: IPv6 literals in brackets."""
    bare = address.strip().strip("[]")
    try:
        return f"[{bare}]" if ipaddress.ip_address(bare).version == 6 else bare
    except ValueError:
        return bare.lower()


def allowed_hosts(listen: str | None, extra: Sequence[str]) -> list[str]:
    """The loopback names, the listening address (on every interface: this
    machine's own names) and the names the operator listed."""
    names = list(LOOPBACK_NAMES)
    if listen is not None and listen.strip() in WILDCARD_ADDRESSES:
        names += [socket.gethostname(), socket.getfqdn()]
    elif listen is not None:
        names.append(host_name(listen))
    names += [name if name.startswith("*") else host_name(name) for name in extra]
    return list(dict.fromkeys(name.lower() for name in names if name))


class OriginCheck:
    """Refuse (403) a POST whose Origin, or else Referer, is not this host."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS or same_origin(scope):
            await self.app(scope, receive, send)
            return
        refused = PlainTextResponse("refused: this form was not posted from this dashboard", 403)
        await refused(scope, receive, send)


def same_origin(scope: Scope) -> bool:
    headers = Headers(scope=scope)
    claimed = headers.get("origin") or headers.get("referer")
    if claimed is None:
        return True  # not a browser's form: the CSRF token decides
    try:
        netloc = urlsplit(claimed).netloc
    except ValueError:
        return False
    host = headers.get("host", "")
    return bool(netloc) and netloc.lower() == host.lower()  # "null" has no netloc
