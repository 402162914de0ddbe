"""Periodic entries without Redis: slot math, the freshness rule, catch-up capping, config."""

from __future__ import annotations

import datetime
import logging
from pathlib import Path
from typing import Any

import pytest

from jobmaster.config import PeriodicEntry, load_config
from jobmaster.errors import ConfigError
from jobmaster.keys import Keys
from jobmaster.periodic import (
    PeriodicTicker,
    latest_slot,
    next_slot,
    previous_slot,
    slot_text,
    slots_after,
)

UTC = datetime.timezone.utc
HOUR = 3600.0


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


def every(seconds: float, **options: Any) -> PeriodicEntry:
    return PeriodicEntry(name="e", job="j", every=seconds, **options)


def cron(expression: str, **options: Any) -> PeriodicEntry:
    return PeriodicEntry(name="c", job="j", cron=expression, **options)


# --- slots ---------------------------------------------------------------------


def test_every_slots_are_aligned_to_the_epoch() -> None:
    entry = every(30)
    assert latest_slot(entry, 95.2) == 90
    assert latest_slot(entry, 90.0) == 90  # at or before now
    assert next_slot(entry, 90.0) == 120
    assert previous_slot(entry, 90.0) == 60


def test_fractional_every_neither_skips_nor_repeats() -> None:
    entry = every(0.1)
    slots, more = slots_after(entry, latest_slot(entry, 1000.0), 1001.0)
    assert not more
    assert len(slots) == 10
    assert len({slot_text(s) for s in slots}) == 10


def test_cron_five_fields() -> None:
    entry = cron("0 3 * * *")
    noon = at(2024, 5, 1, 12, 0)
    assert latest_slot(entry, noon) == at(2024, 5, 1, 3, 0)
    assert next_slot(entry, noon) == at(2024, 5, 2, 3, 0)
    assert latest_slot(entry, at(2024, 5, 1, 3, 0)) == at(2024, 5, 1, 3, 0)
    assert latest_slot(entry, at(2024, 5, 1, 2, 59, 59)) == at(2024, 4, 30, 3, 0)
    assert previous_slot(entry, at(2024, 5, 1, 3, 0)) == at(2024, 4, 30, 3, 0)


def test_cron_sixth_field_is_seconds() -> None:
    entry = cron("* * * * * */10")  # croniter reads a sixth field as seconds
    assert latest_slot(entry, 125.3) == 120
    assert latest_slot(entry, 130.0) == 130
    assert next_slot(entry, 125.3) == 130
    assert slots_after(entry, 100, 131) == ([110, 120, 130], False)


def test_cron_in_a_timezone_follows_its_daylight_saving_time() -> None:
    entry = cron("0 3 * * *", timezone="Europe/Paris")
    # 03:00 in Paris is 01:00 UTC in summer (UTC+2) and 02:00 UTC in winter (UTC+1).
    assert latest_slot(entry, at(2024, 7, 1, 12)) == at(2024, 7, 1, 1)
    assert latest_slot(entry, at(2024, 1, 10, 12)) == at(2024, 1, 10, 2)
    assert next_slot(entry, at(2024, 3, 30, 12)) == at(2024, 3, 31, 1)  # the day it changes


def test_slot_text_round_trips() -> None:
    assert slot_text(1700000000.0) == "1700000000"
    assert float(slot_text(0.30000000000000004)) == 0.30000000000000004


# --- which slots a tick enqueues ----------------------------------------------------


class NoRedis:
    """The ticker registers its script at construction; these tests never run it."""

    def register_script(self, script: str) -> object:
        return None


def ticker(**options: Any) -> PeriodicTicker:
    return PeriodicTicker(NoRedis(), Keys(), [], **options)  # type: ignore[arg-type]


def test_first_tick_enqueues_the_current_slot_only_if_fresh() -> None:
    hourly = every(HOUR)
    start = 10 * HOUR
    # A deploy in the middle of the hour does not fire the hourly job...
    assert ticker()._due(hourly, None, start + 1800, None) == []
    assert ticker()._due(hourly, start - HOUR, start + 1800, None) == []
    # ...one a second after the hour does.
    assert ticker()._due(hourly, None, start + 1, None) == [start]
    assert ticker()._due(hourly, start - HOUR, start + 1, None) == [start]
    assert ticker()._due(hourly, start, start + 1, None) == []  # another master took it


def test_first_tick_takes_the_current_slot_only() -> None:
    assert ticker()._due(every(1), None, 1000.5, None) == [1000]


def test_slots_missed_while_nothing_ran_are_skipped() -> None:
    hourly = every(HOUR)
    start = 10 * HOUR
    now = start + 5 * HOUR + 1
    assert ticker()._due(hourly, start, now, now - 2) == [start + 5 * HOUR]
    assert ticker()._due(hourly, start, now - 10, now - 12) == []


def test_slots_due_since_the_last_tick_are_all_enqueued() -> None:
    # A running master whose tick came late (or Redis was away) loses nothing.
    entry = every(1)
    assert ticker()._due(entry, 100, 103.5, 98.0) == [101, 102, 103]


def test_catch_up_enqueues_every_slot_since_the_stored_one(caplog: Any) -> None:
    entry = every(HOUR, catch_up=True)
    start = 10 * HOUR
    with caplog.at_level(logging.INFO, logger="jobmaster.periodic"):
        slots = ticker()._due(entry, start, start + 3 * HOUR + 60, start + 3 * HOUR + 58)
    assert slots == [start + HOUR, start + 2 * HOUR, start + 3 * HOUR]
    assert "catching up 3 missed slot(s)" in caplog.text


def test_catch_up_needs_a_stored_slot() -> None:
    entry = every(HOUR, catch_up=True)
    assert ticker()._due(entry, None, 10 * HOUR + 1800, 10 * HOUR + 1798) == []


def test_catch_up_is_capped(caplog: Any) -> None:
    entry = every(1, catch_up=True)
    with caplog.at_level(logging.WARNING, logger="jobmaster.periodic"):
        slots = ticker()._due(entry, 1000, 5000.5, 4998.5)
    assert slots == [float(s) for s in range(4901, 5001)]
    assert "more than 100 slots due" in caplog.text
    assert ticker(max_slots=3)._due(entry, 1000, 5000.5, 4998.5) == [4998, 4999, 5000]


def test_tick_without_entries_touches_nothing() -> None:
    assert ticker().tick(1000.0) == []


# --- config ----------------------------------------------------------------------


def load(text: str, tmp_path: Path) -> Any:
    path = tmp_path / "jobmaster.toml"
    path.write_text(text)
    return load_config(path, env={})


def test_config_catch_up_and_timezone(tmp_path: Path) -> None:
    config = load(
        '[periodic.n]\ncron = "0 3 * * *"\njob = "j"\ncatch_up = true\ntimezone = "Europe/Paris"\n',
        tmp_path,
    )
    entry = config.periodic["n"]
    assert (entry.catch_up, entry.timezone, entry.queue) == (True, "Europe/Paris", "default")
    plain = load('[periodic.n]\nevery = 5\njob = "j"\n', tmp_path).periodic["n"]
    assert (plain.catch_up, plain.timezone, plain.enabled) == (False, "UTC", True)


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('cron = "0 3 * * *"\ntimezone = "Mars/Olympus"', "'timezone' must be an IANA time zone"),
        ('cron = "0 3 * * *"\ntimezone = "Europe"', "'timezone' must be an IANA time zone"),
        ('every = 5\ntimezone = "UTC"', "'timezone' applies to 'cron' only"),
        ('every = 5\ncatch_up = "maybe"', "'catch_up' must be true or false"),
        ("every = 5\nargs = [1979-05-27]", "'args' must hold JSON values only"),
        ("every = 5\nunique = 'forever'", "'unique' must be"),
    ],
)
def test_bad_periodic_options(tmp_path: Path, table: str, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(f'[periodic.n]\njob = "j"\n{table}\n', tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / 'jobmaster.toml'}: [periodic.n] {expected}")
