"""Looking for secrets in output, in every form they could be printed in.

A password may show up percent-encoded (in a URL) and a key base64- or
hex-encoded (by code that "helpfully" encodes bytes), so each secret is
searched for in each of those forms.
"""

from __future__ import annotations

import base64
from urllib.parse import quote


def forms(secret: str) -> set[str]:
    """``secret`` as written, percent-encoded, base64 (both alphabets, padded or not), hex."""
    raw = secret.encode()
    encoded = {
        secret,
        quote(secret, safe=""),
        raw.hex(),
        raw.hex().upper(),
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
    }
    return encoded | {text.rstrip("=") for text in encoded}


def assert_no_secret(output: str, secrets: dict[str, str], where: str) -> None:
    """Fail naming the secret, its form, the place and the line that shows it."""
    for label, secret in secrets.items():
        for form in sorted(forms(secret)):
            if form in output:
                line = next(line for line in output.splitlines() if form in line)
                raise AssertionError(f"{label} ({form!r}) appears in {where}: {line!r}")
