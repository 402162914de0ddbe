"""CSRF tokens: one random token per session, required in every POST.

The session cookie is sent with any request the browser makes to us, a
forged form posted from another site included; the token is not (that
site cannot read our pages), so a POST must carry it in its form
(``csrf_token``) or in an ``X-CSRF-Token`` header (the page's own scripts).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import MutableMapping
from typing import Any

FIELD = "csrf_token"
HEADER = "x-csrf-token"


def token(session: MutableMapping[str, Any]) -> str:
    """The session's token, made on first use."""
    value = session.get(FIELD)
    if not isinstance(value, str) or not value:
        value = secrets.token_urlsafe(32)
        session[FIELD] = value
    return value


def valid(session: MutableMapping[str, Any], submitted: object) -> bool:
    """Whether ``submitted`` is this session's token (compared in constant time)."""
    expected = session.get(FIELD)
    if not isinstance(expected, str) or not expected or not isinstance(submitted, str):
        return False
    return hmac.compare_digest(expected.encode(), submitted.encode())
