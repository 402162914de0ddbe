"""Log timestamps: the second formatted once a second, and still exact for every line.

The times are binary fractions (.25, .5, .125...), so that the milliseconds
are the same whichever way they are rounded.
"""

from __future__ import annotations

import datetime
import logging

import pytest

from jobmaster.log import _timestamp


def iso(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def stamp(created: float) -> str:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "m", None, None)
    record.created, record.msecs = created, (created - int(created)) * 1000
    return _timestamp(record)


@pytest.mark.parametrize(
    "created", [0.0, 0.5, 59.875, 60.0, 1_764_464_523.25, 1_764_464_524.125, 4_102_444_800.5]
)
def test_a_line_gets_its_own_second_and_millisecond(created: float) -> None:
    assert stamp(created) == iso(created)


def test_the_cached_second_moves_on_and_back() -> None:
    """Threads log out of order now and then: a line of the previous second
    after one of the next must still show its own second."""
    times = (100.25, 101.5, 100.75, 101.0, 3_600.125)
    assert [stamp(t) for t in times] == [iso(t) for t in times]
