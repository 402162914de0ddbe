"""How the operator's commands print: aligned tables, JSON, ages and times.

Tables are for people (columns padded to the widest cell, long text
clipped); ``--json`` prints the same data whole, with unix times, for
scripts. Nothing here talks to Redis.

Everything a command prints goes through ``echo``: job names, errors and
arguments come from Redis, where anyone who can write may plant terminal
escapes (an OSC 52 sequence sets the operator's clipboard, a CR hides the
start of a line); ``safe`` shows them as ``\x1b`` instead of sending them.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import click

from jobmaster.tolerant import moment

CLIP = 60  # characters of free text (errors, raw payloads) a table cell shows

# Characters a terminal acts on rather than shows: C0 but newline and tab, DEL,
# C1 (0x9b alone starts a CSI sequence), the Unicode line separators and the
# bidirectional overrides (which reorder what the operator reads).
_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
_ESCAPES = {c: f"\\x{c:02x}" for c in _CONTROLS if chr(c) not in "\n\t"}
_ESCAPES |= {c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F))}
_ESCAPES |= {c: f"\\u{c:04x}" for c in range(0x2066, 0x206A)}


def safe(text: str) -> str:
    """``text`` with every control character but newline and tab written out
    (ESC as ``\\x1b``): nothing read from Redis can drive the terminal."""
    return text.translate(_ESCAPES)


def one_line(text: str) -> str:
    """A field read from Redis (an error message, a worker name) kept to the one
    line it is printed on: a forged CR or LF written out as ``\\x0d``/``\\x0a``
    (as ``safe`` writes the other controls), so it cannot fake a line of its
    own; ``safe`` leaves newlines alone, since the layout is made of them."""
    return text.replace("\r", "\\x0d").replace("\n", "\\x0a")


def echo(text: str = "", err: bool = False) -> None:
    """Print one message or table, control characters escaped (see ``safe``)."""
    click.echo(safe(text), err=err)


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], right: Collection[int] = ()
) -> str:
    """Columns padded to their widest cell; the columns in ``right`` (numbers) right-aligned."""
    # Escaped before measuring, so a cell's escapes keep the columns aligned.
    cells = [[str(h) for h in headers], *([safe(str(c)) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def echo_json(data: Any) -> None:
    echo(json.dumps(data, indent=2, sort_keys=True))


def clip(text: str | None, width: int = CLIP) -> str:
    """One line of at most ``width`` characters: a table row must stay one row."""
    if not text:
        return "-"
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def duration(seconds: float, between: str = "") -> str:
    """``45s``, ``3m05s``, ``2h03m``, ``4d02h``: two units are enough to read at a glance.

    ``between`` goes between the two units (the dashboard writes ``3m 05s``);
    ``-`` for a span that is not finite (a forged time in Redis)."""
    if not math.isfinite(seconds):
        return "-"
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{between}{hours:02d}h"
    if hours:
        return f"{hours}h{between}{minutes:02d}m"
    if minutes:
        return f"{minutes}m{between}{secs:02d}s"
    return f"{secs}s"


def relative(at: float | None, now: float) -> str:
    """``in 3m05s`` or ``3m05s ago`` (``-`` when unknown)."""
    if not at:
        return "-"
    return f"in {duration(at - now)}" if at > now else f"{duration(now - at)} ago"


def timestamp(at: float | None, now: float) -> str:
    """Local time and how far off: ``2026-11-29 14:03:00 (3m05s ago)``; ``-``
    when unknown, or when no date can be shown for it (see ``api.base.moment``)."""
    at = moment(at)
    if not at:
        return "-"
    local = datetime.datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")
    return f"{local} ({relative(at, now)})"


def plural(count: int, noun: str, many: str | None = None) -> str:
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"
