"""Encrypted job arguments: ``@job(encrypt=True)``.

Duties:

- turn each ``secret_key`` string into an AES-256-GCM key and a key id;
- seal a job's arguments into one JSON-safe token, and open it again;
- seal what such a job leaves behind (its result, the text of its errors)
  and open it again for ``jobmaster.result``;
- hold the keyring of this process (set by ``configure``, by the worker at
  start, else read from ``JOBMASTER_SECRET_KEY`` on first use).

Key derivation: HKDF-SHA256 of the secret's UTF-8 bytes, no salt, with the
info ``jobmaster arguments v1`` gives the 256-bit AES-GCM key; the same HKDF
with the info ``jobmaster key id v1`` gives 4 bytes, the key id. HKDF is not a
password hash, so a secret must be random (``secrets.token_urlsafe(32)``),
and settings.py refuses secrets shorter than 16 characters.

Token: ``jm1.<key id, 8 hex>.<urlsafe base64 of nonce (12 bytes) + ciphertext
+ tag>``. The plaintext is ``{"args": [...], "kwargs": {...}}`` as JSON; the
associated data is the job's jid and name, so a token copied into another
job's payload fails to open. The key id picks the key when keys are rotated:
the first secret seals, every secret opens.

What the job leaves behind is sealed the same way (``seal_text``): its
result (stored as the token itself, which no JSON text begins with, so a
reader tells a sealed result from a clear one), and its error's message,
backtrace and dead reason (one token in the attempt's and the retry or dead
entry's ``error_sealed`` field). The associated data is
``jm1 <purpose>\n<jid>``: a sealed result cannot be passed off as another
job's, nor as an error, nor as arguments (whose data starts ``jm1\n``). Only
the job's name, queue, jid, times and the error's class stay in clear.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets as random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from jobmaster import payload as wire
from jobmaster.environment import env_value
from jobmaster.errors import ConfigError, JobmasterError

VERSION = "jm1"
NONCE_BYTES = 12
FIELD = "encrypted"  # the wire field holding the token


class DecryptError(wire.BadPayload):
    """A token that cannot be opened; the payload goes to the dead set.

    A ``BadPayload``, so the worker buries it as it buries any payload it
    cannot run. ``reason`` never holds a key or the plaintext.
    """

    def __init__(self, reason: str, what: str = "the arguments") -> None:
        super().__init__(f"cannot decrypt {what}: {reason}")
        self.reason = reason


def _hkdf(secret: str, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(
        secret.encode()
    )


@dataclass(frozen=True, repr=False)
class _Key:
    kid: str
    aead: AESGCM

    def __repr__(self) -> str:
        return f"<key {self.kid}>"  # the key itself is never shown


def _derive(secret: str) -> _Key:
    kid = _hkdf(secret, b"jobmaster key id v1", 4).hex()
    return _Key(kid, AESGCM(_hkdf(secret, b"jobmaster arguments v1", 32)))


def _associated(context: str, purpose: str = "") -> bytes:
    return f"{VERSION}{' ' + purpose if purpose else ''}\n{context}".encode()


class Keyring:
    """The keys of this process: the first seals, all of them open."""

    def __init__(self, secrets: Sequence[str]) -> None:
        self._keys = [_derive(secret) for secret in secrets]

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"<Keyring of {len(self._keys)} key(s)>"

    def seal(self, args: Sequence[Any], kwargs: Mapping[str, Any], context: str = "") -> str:
        """The arguments as a token; ``context`` (jid and job) must match to open it."""
        plain = json.dumps(
            {"args": list(args), "kwargs": dict(kwargs)}, separators=(",", ":"), allow_nan=False
        ).encode()
        return self.seal_bytes(plain, _associated(context))

    def open(self, token: object, context: str = "") -> tuple[list[Any], dict[str, Any]]:
        """The arguments sealed in ``token``; DecryptError says why it cannot be opened."""
        return _arguments(self.open_bytes(token, _associated(context)))

    def seal_bytes(self, plain: bytes, associated: bytes) -> str:
        if not self._keys:
            raise JobmasterError(
                "cannot encrypt: no key; set secret_key (config file, "
                "JOBMASTER_SECRET_KEY or jobmaster.configure(secret_key=...))"
            )
        key = self._keys[0]
        nonce = random.token_bytes(NONCE_BYTES)
        sealed = key.aead.encrypt(nonce, plain, associated)
        return f"{VERSION}.{key.kid}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open_bytes(self, token: object, associated: bytes) -> bytes:
        kid, body = _split(token)
        if not self._keys:
            raise DecryptError("no secret_key is configured in this process")
        candidates = [key for key in self._keys if key.kid == kid]
        if not candidates:
            raise DecryptError(
                f"sealed with key id {kid}, which matches none of the {len(self._keys)} "
                "key(s) in secret_key (a wrong or retired key?)"
            )
        nonce, sealed = body[:NONCE_BYTES], body[NONCE_BYTES:]
        for key in candidates:  # more than one only if two key ids collide
            try:
                return key.aead.decrypt(nonce, sealed, associated)
            except InvalidTag:
                continue
        raise DecryptError(
            f"authentication failed with key id {kid} (tampered, or copied from another job)"
        )


def _split(token: object) -> tuple[str, bytes]:
    if not isinstance(token, str):
        raise DecryptError(f"the {FIELD!r} field is a {type(token).__name__}, not a string")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != VERSION:
        raise DecryptError(f"the token is not a {VERSION} token")
    try:
        body = base64.urlsafe_b64decode(parts[2].encode())
    except (binascii.Error, ValueError):
        raise DecryptError("the token's body is not base64") from None
    if len(body) <= NONCE_BYTES:
        raise DecryptError("the token is too short")
    return parts[1], body


def _arguments(plain: bytes) -> tuple[list[Any], dict[str, Any]]:
    try:
        value = wire.strict_loads(plain)
    except (ValueError, UnicodeDecodeError):
        value = None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("args"), list)
        or not isinstance(value.get("kwargs"), dict)
    ):
        raise DecryptError("the decrypted text is not {args, kwargs}")
    return value["args"], value["kwargs"]


# -- the keyring of this process ---------------------------------------------------
_keyring: Keyring | None = None  # None: read JOBMASTER_SECRET_KEY on first use
_keyring_lock = threading.Lock()


def set_keys(secrets: str | Sequence[str] | None) -> None:
    """Use these secrets from now on (first seals, all open); None: back to the env.

    Validated like the ``secret_key`` setting; the error never shows a key.
    """
    global _keyring
    parsed = None if secrets is None else _parse(secrets, "secret_key")
    with _keyring_lock:
        _keyring = None if parsed is None else Keyring(parsed)


def keyring() -> Keyring:
    """The keyring set by ``set_keys``, else built from JOBMASTER_SECRET_KEY."""
    global _keyring
    with _keyring_lock:
        if _keyring is None:
            from jobmaster.settings import SETTINGS  # the table is not a producer's import

            found = env_value(SETTINGS["secret_key"].env_vars)  # the config's rule
            _keyring = Keyring(_parse(found[1], f"environment {found[0]}") if found else [])
        return _keyring


def _parse(value: object, where: str) -> list[str]:
    from jobmaster.settings import SETTINGS

    try:
        keys: list[str] = SETTINGS["secret_key"].parse(value)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None
    return keys


def _context(payload: Mapping[str, Any]) -> str:
    return f"{payload.get('jid')}\n{payload.get('job')}"


def seal_payload(payload: dict[str, Any]) -> None:
    """Move a built payload's arguments into its ``encrypted`` field (in place)."""
    payload[FIELD] = keyring().seal(payload["args"], payload["kwargs"], _context(payload))
    payload["args"], payload["kwargs"] = [], {}


def arguments(
    payload: Mapping[str, Any], *, sealed: bool = False
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments to call the job with: opened if sealed, else as they are.

    ``sealed``: the job is declared ``encrypt=True``, so arguments in clear are
    refused (DecryptError): whoever can write to Redis cannot know the key,
    and must not make an encrypted job run with arguments of their choosing.
    The seal names the jid and the job (``_context``), so it cannot be moved
    to another job either; it can be replayed whole (see the README).

    The payload itself is left sealed, so a retry or the dead set never stores
    the plaintext.
    """
    if FIELD not in payload:
        if sealed:
            raise DecryptError(
                f"job {payload.get('job')!r} is declared encrypt=True but its arguments "
                "are not sealed (not enqueued by a producer with secret_key)"
            )
        return payload["args"], payload["kwargs"]
    return keyring().open(payload[FIELD], _context(payload))


SEALED_ERROR = "error_sealed"  # the field of an attempt or entry holding its error, sealed
RESULT, ERROR = "result", "error"  # what a sealed text is: its purpose, in its associated data


def is_sealed(payload: Mapping[str, Any]) -> bool:
    """The job's arguments are sealed: what it leaves behind is sealed too."""
    return FIELD in payload


def looks_sealed(text: bytes | str) -> bool:
    """A stored result that is a token, not JSON text (no JSON begins with ``j``)."""
    head = text[: len(VERSION) + 1]
    return (head.decode(errors="replace") if isinstance(head, bytes) else head) == VERSION + "."


def seal_text(text: str, jid: str, purpose: str) -> str:
    """``text`` (a result's JSON, an error's fields as JSON) sealed for ``jid``."""
    return keyring().seal_bytes(text.encode(), _associated(jid, purpose))


def open_text(token: object, jid: str, purpose: str) -> str:
    """What ``seal_text`` sealed; DecryptError says why it cannot be opened."""
    try:
        plain = keyring().open_bytes(token, _associated(jid, purpose))
    except DecryptError as error:
        raise DecryptError(error.reason, f"the {purpose} of job {jid}") from None
    return plain.decode(errors="replace")
