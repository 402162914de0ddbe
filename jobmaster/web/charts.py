"""The pictures, computed here and drawn by templates as inline SVG.

Server-side SVG works with JavaScript off; the page's script only fetches a
fresh copy (``chart.svg``). Geometry is plain arithmetic on the API's
numbers: a bar per minute (succeeded below, failed stacked on top) and a
memory bar per child against its master's ``max_child_mb``.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobmaster.api import Minute
from jobmaster.web.formatting import when

WIDTH, HEIGHT = 720, 160  # the chart's drawing area, in SVG units
BAR_WARN = 0.9  # a child above this share of its limit is drawn in the warning colour


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    ok_y: float
    ok_height: float
    failed_y: float
    failed_height: float
    title: str  # the tooltip: when, and the counts


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int  # jobs in the busiest minute: the top of the scale
    total: int  # jobs in the whole window
    failed: int
    width: int = WIDTH
    height: int = HEIGHT


def throughput_chart(minutes: list[Minute]) -> Chart:
    """Stacked bars, one slot per minute; a minute without data leaves its slot empty."""
    known = [m for m in minutes if m.processed is not None]
    peak = max((m.processed or 0 for m in known), default=0)
    scale = HEIGHT / peak if peak else 0.0
    slot = WIDTH / max(1, len(minutes))
    bars = []
    for index, minute in enumerate(minutes):
        if minute.processed is None:
            continue
        failed = min(minute.failed or 0, minute.processed)
        ok = minute.processed - failed
        ok_height, failed_height = ok * scale, failed * scale
        title = f"{when(minute.start)}: {minute.processed} processed, {failed} failed"
        bars.append(
            Bar(
                x=round(index * slot + 1, 2),
                width=round(max(1.0, slot - 2), 2),
                ok_y=round(HEIGHT - ok_height, 2),
                ok_height=round(ok_height, 2),
                failed_y=round(HEIGHT - ok_height - failed_height, 2),
                failed_height=round(failed_height, 2),
                title=title,
            )
        )
    total = sum(m.processed or 0 for m in known)
    return Chart(bars, peak, total, sum(m.failed or 0 for m in known))


@dataclass(frozen=True)
class MemoryBar:
    used_mb: float
    limit_mb: float  # 0: no limit, the bar is then drawn against the largest child
    share: float  # 0..1 of the bar filled
    warn: bool


def memory_bar(used_mb: float | None, limit_mb: float, largest_mb: float) -> MemoryBar:
    used = used_mb or 0.0
    scale = limit_mb or largest_mb
    share = min(1.0, used / scale) if scale else 0.0
    return MemoryBar(used, limit_mb, share, bool(limit_mb) and share >= BAR_WARN)
