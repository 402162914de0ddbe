"""The memory killer's decisions, without processes: samples in, recycles out."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from jobmaster.supervisor.memory import (
    CONSECUTIVE,
    MB,
    MemoryWatch,
    auto_limit_mb,
    container_limit_bytes,
)
from jobmaster.worker.child import jittered


def test_one_spike_does_not_recycle_three_samples_in_a_row_do() -> None:
    watch = MemoryWatch(limit_mb=150)
    assert CONSECUTIVE == 3
    assert watch.over_limit({1: 200}) == []
    assert watch.over_limit({1: 100}) == []  # back under: the count starts over
    assert watch.over_limit({1: 200}) == []
    assert watch.over_limit({1: 210}) == []
    assert watch.over_limit({1: 220}) == [(1, 220)]
    assert watch.over_limit({1: 230}) == []  # counted afresh after a recycle decision


def test_each_child_is_counted_on_its_own_and_the_gone_are_forgotten() -> None:
    watch = MemoryWatch(limit_mb=100)
    for _ in range(2):
        assert watch.over_limit({1: 150, 2: 150}) == []
    assert watch.over_limit({1: 150}) == [(1, 150)]  # child 2 is gone
    assert 2 not in watch.over
    assert watch.over_limit({2: 150}) == []  # a new child 2 starts from zero


def test_no_limit_means_no_recycle() -> None:
    watch = MemoryWatch(limit_mb=0)
    for _ in range(5):
        assert watch.over_limit({1: 10_000}) == []


def test_the_guard_picks_the_largest_child_at_90_percent_of_the_container() -> None:
    watch = MemoryWatch(limit_mb=0, container_mb=1000)
    assert watch.guard({1: 400, 2: 499}) is None  # 899 < 900
    assert watch.guard({1: 400, 2: 500}) == (2, 500)
    assert MemoryWatch(limit_mb=0).guard({1: 10_000}) is None  # no container limit known


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"memory.max": "1073741824\n"}, 2**30),
        ({"memory.max": "max\n"}, None),
        ({"memory/memory.limit_in_bytes": "536870912\n"}, 2**29),
        ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1 "unlimited"
        ({}, None),
        ({"memory.max": "garbage"}, None),
    ],
    ids=["v2", "v2 max", "v1", "v1 unlimited", "absent", "unreadable"],
)
def test_container_limit_from_cgroup_v2_or_v1(
    files: dict[str, str], expected: int | None, tmp_path: Path
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert container_limit_bytes(str(tmp_path)) == expected


def test_auto_limit_is_each_child_s_share_after_the_master_less_10_percent() -> None:
    assert auto_limit_mb(2048 * MB, 48 * MB, 4) == int((2000 / 4) * 0.9)
    assert auto_limit_mb(100 * MB, 200 * MB, 2) == 1  # never zero (which would mean off)


def test_max_jobs_per_child_is_jittered_by_10_percent() -> None:
    random.seed(7)
    draws = [jittered(100) for _ in range(500)]
    assert min(draws) >= 90 and max(draws) <= 110
    assert len(set(draws)) > 10  # children started together don't all recycle together
    assert jittered(0) == 0
    assert jittered(1) == 1
