"""usable_cpus against fake cgroup trees: the default of ``processes``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobmaster import cpus
from jobmaster.cpus import usable_cpus


@pytest.fixture(autouse=True)
def eight_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend the affinity mask allows 8 CPUs, whatever this machine has."""
    monkeypatch.setattr(cpus, "_affinity_cpus", lambda: 8)


def tree(root: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return str(root)


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [
        ("max 100000", 8),  # no quota: the affinity mask decides
        ("150000 100000", 2),  # 1.5 CPUs of time keeps two children busy
        ("200000 100000", 2),
        ("50000 100000", 1),  # never fewer than one
        ("1600000 100000", 8),  # a quota above the mask does not add CPUs
        ("garbage", 8),
    ],
)
def test_cgroup_v2(tmp_path: Path, cpu_max: str, expected: int) -> None:
    assert usable_cpus(tree(tmp_path, {"cpu.max": cpu_max})) == expected


@pytest.mark.parametrize("folder", ["cpu", "cpu,cpuacct"])
def test_cgroup_v1(tmp_path: Path, folder: str) -> None:
    root = tree(
        tmp_path, {f"{folder}/cpu.cfs_quota_us": "300000", f"{folder}/cpu.cfs_period_us": "100000"}
    )
    assert usable_cpus(root) == 3


def test_cgroup_v1_unlimited(tmp_path: Path) -> None:
    root = tree(tmp_path, {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"})
    assert usable_cpus(root) == 8


def test_no_cgroup_files(tmp_path: Path) -> None:
    assert usable_cpus(str(tmp_path / "missing")) == 8


def test_real_machine_is_at_least_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real affinity mask and the real cgroup
    count = usable_cpus()
    assert 1 <= count <= (os.cpu_count() or count)
