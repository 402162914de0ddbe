"""The memory killer's decisions, without processes: samples in, recycles out."""

from __future__ import annotations

import random

import pytest

from jobmaster.supervisor.memory import (
    AUTO_FILL,
    CLOSE,
    CLOSE_INTERVAL,
    CONSECUTIVE,
    FAR_OVER,
    GUARD,
    LAST_LINE,
    MB,
    WATCH,
    WATCH_INTERVAL,
    MemoryWatch,
    Reading,
    auto_limit_mb,
)
from jobmaster.worker.child import jittered


def test_one_spike_does_not_recycle_three_samples_in_a_row_do() -> None:
    watch = MemoryWatch(limit_mb=150)
    assert CONSECUTIVE == 3
    assert watch.over_limit({1: 160}) == []
    assert watch.over_limit({1: 100}) == []  # back under: the count starts over
    assert watch.over_limit({1: 160}) == []
    assert watch.over_limit({1: 170}) == []
    assert watch.over_limit({1: 180}) == [(1, 180, "limit")]
    assert watch.over_limit({1: 180}) == []  # counted afresh after a recycle decision


def test_a_child_far_over_its_limit_is_recycled_at_the_first_sample() -> None:
    """A child growing 20 MB/s is 200-300 MB past its limit by a third sample 5 s apart."""
    watch = MemoryWatch(limit_mb=150)
    assert FAR_OVER == 1.25
    assert watch.over_limit({1: 100, 2: 100}) == []
    assert watch.over_limit({1: 187, 2: 188}) == [(2, 188, "far")]


def test_a_child_far_over_from_its_first_sample_waits_its_three_samples() -> None:
    """RSS and a 400 MB preloaded app: its replacement would be as big."""
    watch = MemoryWatch(limit_mb=200)
    assert watch.over_limit({1: 437}) == []
    assert watch.over_limit({1: 437}) == []
    assert watch.over_limit({1: 437}) == [(1, 437, "limit")]


def test_each_child_is_counted_on_its_own_and_the_gone_are_forgotten() -> None:
    watch = MemoryWatch(limit_mb=100)
    for _ in range(2):
        assert watch.over_limit({1: 110, 2: 110}) == []
    assert watch.over_limit({1: 110}) == [(1, 110, "limit")]  # child 2 is gone
    assert 2 not in watch.over
    assert watch.over_limit({2: 110}) == []  # a new child 2 starts from zero


def test_no_limit_means_no_recycle() -> None:
    watch = MemoryWatch(limit_mb=0)
    for _ in range(5):
        assert watch.decide(Reading({1: 10_000}), {1}).recycle == []


def test_a_leaving_child_is_not_recycled_again() -> None:
    watch = MemoryWatch(limit_mb=100)
    assert watch.decide(Reading({1: 500}, leaving=frozenset({1})), {1}).recycle == []


def test_a_child_not_ready_yet_is_counted_but_not_judged_on_its_own() -> None:
    """RSS with a big preloaded app: every fresh child looks far over; recycled
    before it was even ready, it would never serve."""
    watch = MemoryWatch(limit_mb=100, container_mb=1000)
    starting = Reading({1: 430}, starting=frozenset({1}), used_mb=500)
    for _ in range(CONSECUTIVE):
        assert watch.decide(starting, {1}).recycle == []
    assert watch.decide(Reading({1: 90}, used_mb=500), {1}).recycle == []
    assert watch.decide(Reading({1: 430}, used_mb=500), {1}).recycle == [(1, 430, "far")]


@pytest.mark.parametrize(
    ("used", "interval"),
    [(100, 5.0), (699, 5.0), (700, WATCH_INTERVAL), (849, 0.5), (850, CLOSE_INTERVAL)],
)
def test_sampling_speeds_up_as_the_container_fills(used: float, interval: float) -> None:
    watch = MemoryWatch(limit_mb=0, container_mb=1000, interval=5.0)
    assert (WATCH, CLOSE) == (0.70, 0.85)
    assert watch.decide(Reading({1: 50}, used_mb=used), {1}).interval == interval


def test_sampling_speeds_up_as_a_child_nears_its_own_limit() -> None:
    watch = MemoryWatch(limit_mb=100, interval=5.0)
    assert watch.decide(Reading({1: 60}), {1}).interval == 5.0
    assert watch.decide(Reading({1: 75}), {1}).interval == 0.5
    assert watch.decide(Reading({1: 90, 2: 10}), {1, 2}).interval == 0.2
    # never slower than memory_check_interval
    assert MemoryWatch(limit_mb=100, interval=0.1).decide(Reading({1: 90}), {1}).interval == 0.1


def test_the_guard_acts_on_the_cgroup_usage_not_only_the_children() -> None:
    """The kernel compares the whole group's usage (master, page cache, a Redis)."""
    watch = MemoryWatch(limit_mb=0, container_mb=1000)
    assert GUARD == 0.90
    assert watch.share(2) == AUTO_FILL * 1000 / 2  # no share given: AUTO_FILL, shared
    assert watch.decide(Reading({1: 100, 2: 450}, used_mb=899), {1, 2}).recycle == []
    actions = watch.decide(Reading({1: 100, 2: 450}, used_mb=900), {1, 2})
    assert actions.recycle == [(2, 450, "guard")]
    assert actions.kill is None and actions.used_mb == 900 and actions.not_ours is None


def test_growth_that_is_not_the_childrens_is_reported_never_acted_on() -> None:
    """Hole 4: usage held high by the rest (a tmpfs file, a Redis, a sidecar, a
    job's subprocess the tree missed) recycled and killed innocent children,
    whose replacements grew back, and buried their jobs."""
    watch = MemoryWatch(limit_mb=0, container_mb=1000, share_mb=300)
    for used in (900, 960, 999):
        actions = watch.decide(Reading({1: 100, 2: 200}, used_mb=used), {1, 2})
        assert actions.recycle == [] and actions.kill is None and actions.push_back == []
        assert actions.not_ours == (300, used - 300)
    # A child over its share, whose death brings usage under the line: killed.
    actions = watch.decide(Reading({1: 100, 2: 320}, used_mb=960), {1, 2})
    assert actions.kill == (2, 320) and actions.not_ours is None


def test_no_kill_that_would_not_bring_usage_back_under_the_line() -> None:
    small = MemoryWatch(limit_mb=0, container_mb=1000, share_mb=20)
    actions = small.decide(Reading({1: 25, 2: 30}, used_mb=990), {1, 2})
    assert actions.kill is None  # 990 - 30 = 960: still over, for nothing


def test_a_kill_that_freed_too_little_stops_the_kills_until_usage_falls() -> None:
    """The usage does not follow the children (or something else grew
    meanwhile): a second kill would free no more. Never a kill loop."""
    watch = MemoryWatch(limit_mb=0, container_mb=1000, share_mb=20)
    assert watch.decide(Reading({1: 30}, used_mb=960), {1}).kill == (1, 30)
    after = watch.decide(Reading({2: 30}, used_mb=958), {2})  # reaped: freed 2 MB of 30
    assert after.freed_little == (30, 2) and after.kill is None
    assert watch.decide(Reading({2: 31}, used_mb=960), {2}).kill is None
    assert watch.decide(Reading({2: 31}, used_mb=800), {2}).kill is None  # under GUARD: reset
    assert watch.decide(Reading({2: 31}, used_mb=960), {2}).kill == (2, 31)


def test_the_guard_counts_leaving_children_and_acts_again_while_they_leave() -> None:
    watch = MemoryWatch(limit_mb=0, container_mb=1000)
    sizes = {1: 300, 2: 250, 3: 200}
    # Child 1 is leaving: once it is gone, 920 - 300 = 620 is under the line.
    leaving = Reading(sizes, leaving=frozenset({1}), used_mb=920)
    assert watch.decide(leaving, {1, 2, 3}).recycle == []
    # Child 1 is a small one: its going is not enough, the guard acts again.
    small = Reading({1: 10, 2: 350, 3: 200}, leaving=frozenset({1}), used_mb=920)
    assert watch.decide(small, {1, 2, 3}).recycle == [(2, 350, "guard")]


def test_the_guard_counts_children_recycled_in_the_same_sample_as_leaving() -> None:
    watch = MemoryWatch(limit_mb=100, container_mb=1000)
    watch.decide(Reading({1: 90, 2: 90}, used_mb=600), {1, 2})
    actions = watch.decide(Reading({1: 400, 2: 90}, used_mb=910), {1, 2})
    assert actions.recycle == [(1, 400, "far")]  # 910 - 400 is under the line: enough


def test_no_room_a_recycled_child_pushes_its_jobs_back_once() -> None:
    watch = MemoryWatch(limit_mb=0, container_mb=1000)
    recycled = frozenset({1})
    roomy = Reading({1: 300, 2: 100}, leaving=recycled, recycled=recycled, used_mb=850)
    assert watch.decide(roomy, {1, 2}).push_back == []  # room: it finishes its jobs
    full = Reading({1: 300, 2: 100}, leaving=recycled, recycled=recycled, used_mb=905)
    assert watch.decide(full, {1, 2}).push_back == [1]
    assert watch.decide(full, {1, 2}).push_back == []  # told once


def test_the_last_line_kills_the_largest_child_leaving_ones_included_once() -> None:
    watch = MemoryWatch(limit_mb=0, container_mb=1000)
    assert LAST_LINE == 0.95
    reading = Reading({1: 300, 2: 350, 3: 100}, leaving=frozenset({2}), used_mb=951)
    actions = watch.decide(reading, {1, 2, 3})
    assert actions.kill == (2, 350)
    assert actions.recycle == []  # 951 - 350 is under the guard line
    # Not reaped yet: no second kill on the next sample, whatever it says.
    assert watch.decide(Reading({1: 300, 3: 100}, used_mb=960), {1, 2, 3}).kill is None
    # Reaped: its death freed what it held; when usage is back over the
    # line, the largest again (of two children now: a share of 400 MB).
    assert watch.decide(Reading({1: 300, 3: 100}, used_mb=600), {1, 3}).freed_little is None
    assert watch.decide(Reading({1: 620, 3: 100}, used_mb=960), {1, 3}).kill == (1, 620)


def test_without_a_readable_usage_the_master_and_every_child_are_counted() -> None:
    """A fake tree or an unreadable usage file: our own processes are the estimate."""
    watch = MemoryWatch(limit_mb=0, container_mb=1000)
    reading = Reading({1: 400, 2: 450}, leaving=frozenset({1}), master_mb=40)
    assert watch.decide(reading, {1, 2}).used_mb == 890
    assert watch.decide(Reading({1: 400, 2: 460}, master_mb=40), {1, 2}).recycle == [
        (2, 460, "guard")
    ]


def test_auto_limit_shares_80_percent_of_the_container_after_what_it_holds() -> None:
    assert AUTO_FILL == 0.80
    assert auto_limit_mb(600 * MB, 31 * MB, 3) == int((480 - 31) / 3)
    assert auto_limit_mb(100 * MB, 200 * MB, 2) == 1  # never zero (which would mean off)


def test_max_jobs_per_child_is_jittered_by_10_percent() -> None:
    random.seed(7)
    draws = [jittered(100) for _ in range(500)]
    assert min(draws) >= 90 and max(draws) <= 110
    assert len(set(draws)) > 10  # children started together don't all recycle together
    assert jittered(0) == 0
    assert jittered(1) == 1


def test_children_past_the_pool_size_share_what_it_was_given() -> None:
    """TTIN: a fourth child of a pool of three, each given 200 MB, shares the
    same 600 MB; a child and its replacement beside it during a recycle share
    one slot (the leaving one does not count)."""
    watch = MemoryWatch(limit_mb=0, container_mb=1000, share_mb=200, processes=3)
    assert watch.share(3, 3) == 200
    assert watch.share(4, 3) == 200  # one of the four is leaving
    assert watch.share(4, 4) == 150
    actions = watch.decide(Reading({1: 160, 2: 160, 3: 160, 4: 160}, used_mb=920), {1, 2, 3, 4})
    assert [r[2] for r in actions.recycle] == ["guard"] and actions.not_ours is None
