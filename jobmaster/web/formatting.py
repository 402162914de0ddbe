"""Jinja filters: times, durations, sizes, and job arguments shortened for lists.

They return plain text; the templates' autoescape makes it safe, so a job
argument holding markup is shown as the characters it is.
"""

from __future__ import annotations

import datetime
import json
import math
import time
from typing import Any

from jobmaster import crypto
from jobmaster.api.records import SHOW_CHARS
from jobmaster.commands.output import duration as cli_duration
from jobmaster.tolerant import moment as shown

SHORT = 120  # characters of a job's arguments shown in a list row


def when(moment: float | None) -> str:
    """A unix time in UTC, to the second (the workers count days in UTC too);
    ``-`` when unknown or out of the range a date can be shown for."""
    moment = shown(moment)
    if moment is None:
        return "-"
    stamp = datetime.datetime.fromtimestamp(moment, datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float | None) -> str:
    """``42s``, ``3m 05s``, ``2h 01m``, ``4d 03h``."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if abs(seconds) < 10 and abs(seconds) != int(abs(seconds)):
        return f"{abs(seconds):.1f}s"  # short jobs: a tenth of a second matters
    return cli_duration(abs(seconds), between=" ")


def relative(moment: float | None, now: float | None = None) -> str:
    """``in 3m 05s`` or ``3m 05s ago``."""
    if moment is None or not math.isfinite(moment):
        return "-"
    delta = moment - (now or time.time())
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def arguments(args: list[Any], kwargs: dict[str, Any] | None = None) -> str:
    """A call's arguments as JSON: ``1, "x", key=true``."""
    parts = [json.dumps(arg, ensure_ascii=False) for arg in args]
    parts += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in (kwargs or {}).items()]
    return ", ".join(parts)


def record_arguments(record: Any) -> str:
    """A JobRecord's args and kwargs (garbage: its raw text; one too long to
    read: its size)."""
    if record.payload is None and record.oversized:
        return f"(too long to show: {record.length:,} bytes)"
    if record.payload is None:
        return str(record.text)
    if crypto.is_sealed(record.payload):  # encrypt=True: the dashboard never opens them
        return "(sealed: encrypt=True)"
    return arguments(record.args, record.kwargs)


def shorten(value: str, limit: int = SHORT) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def pretty(value: Any) -> str:
    """A payload or an argument list, indented, for a job's details; cut to
    ``SHOW_CHARS`` (a 1 MB payload is not sent whole to the browser)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    if len(text) <= SHOW_CHARS:
        return text
    return text[:SHOW_CHARS] + f"\n… (truncated: {len(text):,} characters in all)"


def megabytes(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


FILTERS = {
    "when": when,
    "duration": duration,
    "relative": relative,
    "shorten": shorten,
    "arguments": record_arguments,
    "pretty": pretty,
    "mb": megabytes,
}
