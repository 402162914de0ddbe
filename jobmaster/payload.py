"""The wire format: one JSON object per job (documented in the README).

Producers in any language can enqueue by writing this object; workers read
it back without ever importing or calling anything it names (see
registry.py). Fields we don't know are kept as they are.
"""

from __future__ import annotations

import json
import math
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

JSON = Any  # a value that json.dumps accepts and round-trips

REQUIRED_FIELDS: dict[str, type] = {"jid": str, "job": str, "args": list, "queue": str}
# Fields whose text becomes part of Redis key names (status, queue, lock).
KEY_FIELDS = ("jid", "queue", "unique_digest")
# Fields a chain's next job (and its on_failure) inherits from the step before
# it: the trace context a tracing middleware writes (contrib/otel.py), so a
# chain is one trace however many workers run its steps.
CARRIED = ("trace_context",)


class BadPayload(ValueError):
    """A payload that cannot be run: not JSON, not an object, missing fields."""


def new_jid() -> str:
    """24 hex characters: 96 random bits, unique without coordination."""
    return secrets.token_hex(12)


def check_json(value: object, where: str) -> None:
    """Raise TypeError naming ``where`` if ``value`` would not survive JSON.

    Checked up front, with a path into the value, because a producer should
    learn at ``enqueue`` time which argument is wrong, not from a dead job.
    Dict keys must be strings: json.dumps would silently turn ``{1: x}`` into
    ``{"1": x}`` and the job would get other arguments than it was given.
    """
    if value is None or isinstance(value, str | bool):
        return
    if isinstance(value, int):
        _check_int(value, where)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where} is {value!r}, which JSON cannot represent")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_json(item, f"{where}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has a non-string key {key!r}; JSON keys are strings")
            check_json(item, f"{where}[{key!r}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}, which is not JSON-serialisable "
        "(pass ids and plain values; jobmaster never pickles)"
    )


def _check_int(value: int, where: str) -> None:
    # json.dumps writes an int with int.__repr__, which refuses more digits
    # than sys.get_int_max_str_digits() (4300 by default) with a ValueError.
    if value.bit_length() <= 64:
        return
    try:
        int.__repr__(value)
    except ValueError:
        limit = sys.get_int_max_str_digits()
        raise TypeError(
            f"{where} is an integer of more than {limit} digits, which JSON cannot write"
        ) from None


def _check_argument(value: object, where: str) -> None:
    try:
        check_json(value, where)
    except RecursionError:  # check_json recurses once per level, as json.dumps does
        raise TypeError(f"{where} is nested too deeply for JSON (or contains itself)") from None


def check_arguments(job_name: str, args: Sequence[object], kwargs: Mapping[str, object]) -> None:
    """Raise TypeError naming the job and the first bad argument."""
    for index, arg in enumerate(args):
        _check_argument(arg, f"{job_name}: argument {index}")
    for key, arg in kwargs.items():
        _check_argument(arg, f"{job_name}: keyword argument {key!r}")


def build(
    job_name: str,
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    queue: str,
    retry: int | bool | None = None,
    extra: Mapping[str, JSON] | None = None,
) -> dict[str, JSON]:
    """A new payload; ``enqueued_at`` is set when it is pushed."""
    check_arguments(job_name, args, kwargs)
    now = time.time()
    payload: dict[str, JSON] = {
        "jid": new_jid(),
        "job": job_name,
        "args": list(args),
        "kwargs": dict(kwargs),
        "queue": queue,
        "created_at": now,
    }
    if retry is not None:
        payload["retry"] = retry
    if extra:
        payload.update(extra)
    return payload


# One encoder for every payload: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode(payload: Mapping[str, JSON]) -> bytes:
    """Compact UTF-8 JSON; ``allow_nan=False`` keeps it readable by other languages."""
    return _ENCODER.encode(payload).encode()


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constants(name: str) -> JSON:
    raise ValueError(f"{name} is not JSON")


# One decoder for every payload: json.loads with hooks builds a new one per call,
# which was a tenth of a worker's time on short jobs.
_STRICT = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constants)


def strict_loads(raw: bytes | str) -> JSON:
    """``json.loads`` that refuses NaN, Infinity and overflowing numbers.

    Python's defaults accept them, but ``encode`` (rightly) cannot write them
    back, so a payload holding one could never be stored in the retry or
    dead set: it is refused here, as not JSON, on the way in.
    """
    if isinstance(raw, bytes | bytearray):  # as json.loads does it
        raw = raw.decode(json.detect_encoding(raw), "surrogatepass")
    try:
        return _STRICT.decode(raw)
    except RecursionError:  # "[[[[...": json recurses once per level of nesting
        raise ValueError("JSON nested too deeply") from None


def decode(raw: bytes | str) -> dict[str, JSON]:
    """Parse and check a payload read from Redis; raise BadPayload with the reason."""
    try:
        value = strict_loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadPayload(f"payload is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise BadPayload(f"payload is a JSON {type(value).__name__}, not an object")
    for field, kind in REQUIRED_FIELDS.items():
        if field not in value:
            raise BadPayload(f"payload has no {field!r} field")
        if not isinstance(value[field], kind):
            raise BadPayload(f"payload field {field!r} is not a {kind.__name__}")
    kwargs = value.setdefault("kwargs", {})
    if not isinstance(kwargs, dict):
        raise BadPayload("payload field 'kwargs' is not an object")
    for field in KEY_FIELDS:
        if not key_safe(value.get(field, "")):
            raise BadPayload(f"payload field {field!r} is not valid Unicode (a lone surrogate)")
    return value


def key_safe(text: object) -> bool:
    """Can ``text`` be part of a Redis key name? JSON may carry lone surrogates
    ("\\ud800"), which have no UTF-8 form: redis-py cannot send them."""
    if not isinstance(text, str):
        return True  # not text: never used as a key part as it is
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def raw_text(raw: bytes) -> dict[str, str]:
    """The raw bytes of a broken payload, kept readable inside a JSON wrapper."""
    try:
        return {"raw": raw.decode()}
    except UnicodeDecodeError:
        return {"raw": raw.decode(errors="backslashreplace"), "raw_hex": raw.hex()}


def buried(raw: bytes, reason: str, queue: str | None) -> dict[str, JSON]:
    """The dead-set entry for a payload that could not be run.

    A payload that is a JSON object keeps all its fields; anything else is
    wrapped, its raw text kept, so an operator can see exactly what arrived.
    """
    now = time.time()
    try:
        value = strict_loads(raw)
    except (ValueError, UnicodeDecodeError):
        value = None
    if isinstance(value, dict):
        entry: dict[str, JSON] = value
        entry.setdefault("jid", new_jid())
        if not key_safe(entry["jid"]):
            # The jid names the job's status key: a new one, the raw bytes kept.
            entry.update(raw_text(raw), jid=new_jid())
    else:
        entry = {"jid": new_jid(), "job": None, "queue": queue, **raw_text(raw)}
    entry["error_class"] = "BadPayload"
    entry["error_message"] = reason
    entry["dead_reason"] = reason
    entry["died_at"] = now
    return entry
