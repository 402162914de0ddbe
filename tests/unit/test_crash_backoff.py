"""Crash-loop backoff: children dying right after start come back slower."""

from __future__ import annotations

import pytest

from jobmaster.supervisor.backoff import FIRST_DELAY, HEALTHY_AFTER, MAX_DELAY, CrashBackoff


def test_constants_are_what_the_tests_assume() -> None:
    assert (FIRST_DELAY, MAX_DELAY) == (0.1, 30.0)
    assert HEALTHY_AFTER > 0


def test_deaths_right_after_start_double_the_delay_up_to_the_cap() -> None:
    backoff = CrashBackoff()
    delays = [backoff.delay_after_death(0.0) for _ in range(12)]
    expected = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]
    assert delays == pytest.approx(expected)
    assert backoff.failures == 12


def test_the_cap_holds_after_very_many_failures() -> None:
    backoff = CrashBackoff()
    for _ in range(1100):
        delay = backoff.delay_after_death(0.5)
    assert delay == MAX_DELAY


def test_a_death_just_short_of_healthy_still_counts() -> None:
    backoff = CrashBackoff()
    assert backoff.delay_after_death(HEALTHY_AFTER - 0.01) == pytest.approx(0.1)
    assert backoff.delay_after_death(HEALTHY_AFTER - 0.01) == pytest.approx(0.2)


def test_a_death_after_a_healthy_life_is_replaced_at_once_and_resets() -> None:
    backoff = CrashBackoff()
    for _ in range(5):
        backoff.delay_after_death(0.0)
    assert backoff.delay_after_death(HEALTHY_AFTER) == 0.0
    assert backoff.failures == 0
    assert backoff.delay_after_death(0.0) == pytest.approx(0.1)  # the sequence starts over
    assert backoff.delay_after_death(HEALTHY_AFTER + 3600) == 0.0
    assert backoff.delay_after_death(HEALTHY_AFTER / 2) == pytest.approx(0.1)


def test_each_slot_has_its_own_sequence() -> None:
    first, second = CrashBackoff(), CrashBackoff()
    first.delay_after_death(0.0)
    first.delay_after_death(0.0)
    assert second.delay_after_death(0.0) == pytest.approx(0.1)
    assert first.delay_after_death(0.0) == pytest.approx(0.4)
