"""Security headers on every answer of the dashboard.

The content policy allows only our own scripts, styles and images, so even
if some job data escaped the templates' escaping, a browser would not run
it; frames are refused (no clickjacking of the action buttons).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class SecureCookies:
    """Mark the session cookie ``Secure`` (sent over HTTPS only), as
    ``web_cookie_secure`` says: ``"true"``, ``"false"``, or ``"auto"``: when
    the request came over HTTPS (TLS, or a proxy's ``X-Forwarded-Proto`` that
    web_trusted_proxies names), so a cookie set behind HTTPS never travels in clear
    while plain-HTTP loopback use keeps working."""

    def __init__(self, app: ASGIApp, mode: str = "auto") -> None:
        self.app, self.mode = app, mode

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        secure = self.mode == "true" or (self.mode == "auto" and scope.get("scheme") == "https")
        if scope["type"] != "http" or not secure:
            await self.app(scope, receive, send)
            return

        async def send_secure(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    (name, value + b"; secure")
                    if name.lower() == b"set-cookie" and b"; secure" not in value.lower()
                    else (name, value)
                    for name, value in message.get("headers", [])
                ]
            await send(message)

        await self.app(scope, receive, send_secure)
