"""Finding our memory cgroup and its limit, on fake /proc and /sys/fs/cgroup trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobmaster.cgroups import MemoryCgroup, Usage, find_memory_cgroup

MB = 2**20
V1_UNLIMITED = "9223372036854771712"


class Host:
    """A fake machine: ``/proc/self/{cgroup,mountinfo}`` and a cgroup mount tree."""

    def __init__(self, tmp_path: Path, cgroup: str, mounts: list[tuple[str, str, str]]) -> None:
        """``mounts``: (fstype and super options as mountinfo writes them, e.g.
        "cgroup2 cgroup2 rw" or "cgroup cgroup rw,memory"; mount point under
        /sys/fs/cgroup; the root of the hierarchy the mount shows)."""
        self.tmp = tmp_path
        self.root = tmp_path / "sys/fs/cgroup"
        self.proc = tmp_path / "proc/self"
        self.proc.mkdir(parents=True)
        (self.proc / "cgroup").write_text(cgroup)
        lines = [f"30 23 0:26 / {self.root} rw,nosuid - tmpfs tmpfs ro,mode=755"]
        for number, (kind, point, root) in enumerate(mounts):
            where = self.root / point if point else self.root
            where.mkdir(parents=True, exist_ok=True)
            lines.append(f"{40 + number} 30 0:{40 + number} {root} {where} rw,relatime - {kind}")
        (self.proc / "mountinfo").write_text("\n".join(lines) + "\n")

    def write(self, path: str, text: str) -> Path:
        file = self.root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
        return file

    def find(self) -> MemoryCgroup | None:
        return find_memory_cgroup(str(self.root), str(self.proc))


V2_MOUNT = [("cgroup2 cgroup2 rw,nsdelegate", "", "/")]
V1_MOUNTS = [
    ("cgroup cgroup rw,cpu,cpuacct", "cpu,cpuacct", "/"),
    ("cgroup cgroup rw,memory", "memory", "/"),
]


def test_v2_the_limit_of_the_group_we_are_in_not_the_mount_root(tmp_path: Path) -> None:
    host = Host(tmp_path, "0::/jobs/worker\n", V2_MOUNT)
    host.write("cgroup.controllers", "cpu memory pids\n")  # the root group has no memory.max
    host.write("jobs/memory.max", "max\n")
    host.write("jobs/worker/memory.max", f"{600 * MB}\n")
    found = host.find()
    assert found == MemoryCgroup(2, host.root / "jobs/worker", host.root / "jobs/worker", 600 * MB)
    assert found.describe() == f"600 MB (cgroup v2 {host.root}/jobs/worker/memory.max)"


def test_v2_the_tightest_limit_up_the_hierarchy_and_the_group_it_is_set_on(
    tmp_path: Path,
) -> None:
    host = Host(tmp_path, "0::/outer/middle/inner\n", V2_MOUNT)
    host.write("outer/memory.max", f"{2048 * MB}\n")
    host.write("outer/middle/memory.max", f"{512 * MB}\n")
    host.write("outer/middle/inner/memory.max", "max\n")
    found = host.find()
    assert found is not None
    assert (found.limit, found.limited) == (512 * MB, host.root / "outer/middle")
    assert found.own == host.root / "outer/middle/inner"
    assert "above our group" in found.describe()


def test_systemd_memory_max_on_the_service_or_on_its_slice(tmp_path: Path) -> None:
    service = "system.slice/app.slice/jobmaster\\x2dweb.service"
    host = Host(tmp_path, f"0::/{service}\n", V2_MOUNT)
    host.write("system.slice/memory.max", "max\n")
    host.write("system.slice/app.slice/memory.max", f"{1024 * MB}\n")  # MemoryMax= on the slice
    host.write(f"{service}/memory.max", f"{1536 * MB}\n")  # and a looser one on the unit
    found = host.find()
    assert found is not None
    assert (found.limit, found.limited) == (1024 * MB, host.root / "system.slice/app.slice")
    host.write(f"{service}/memory.max", f"{700 * MB}\n")
    found = host.find()
    assert found is not None and (found.limit, found.limited) == (700 * MB, host.root / service)


def test_v2_namespace_root_of_a_container(tmp_path: Path) -> None:
    """Docker or Kubernetes with a cgroup namespace: our group is shown as the root."""
    host = Host(tmp_path, "0::/\n", V2_MOUNT)
    host.write("memory.max", f"{256 * MB}\n")
    host.write("memory.current", f"{100 * MB}\n")
    found = host.find()
    assert found == MemoryCgroup(2, host.root, host.root, 256 * MB)


def test_a_path_outside_the_namespace_falls_back_to_the_mount_root(tmp_path: Path) -> None:
    """Moved out of the namespace's root after it was made: the kernel writes /../x."""
    host = Host(tmp_path, "0::/../sibling\n", V2_MOUNT)
    host.write("memory.max", f"{300 * MB}\n")
    found = host.find()
    assert found is not None and (found.limit, found.own) == (300 * MB, host.root)


def test_unlimited_everywhere_is_no_limit(tmp_path: Path) -> None:
    host = Host(tmp_path, "0::/a/b\n", V2_MOUNT)
    host.write("a/memory.max", "max\n")
    host.write("a/b/memory.max", "max\n")
    found = host.find()
    assert found is not None and found.limit is None
    assert found.describe().startswith("none (cgroup v2")


def test_v1_nested_group_tightest_limit(tmp_path: Path) -> None:
    cgroup = "5:cpu,cpuacct:/\n4:memory:/process_api/abc/nested\n0::/\n"
    host = Host(tmp_path, cgroup, V1_MOUNTS)
    host.write("memory/memory.limit_in_bytes", V1_UNLIMITED)
    host.write("memory/process_api/memory.limit_in_bytes", V1_UNLIMITED)
    host.write("memory/process_api/abc/memory.limit_in_bytes", f"{800 * MB}\n")
    host.write("memory/process_api/abc/nested/memory.limit_in_bytes", f"{600 * MB}\n")
    found = host.find()
    nested = host.root / "memory/process_api/abc/nested"
    assert found == MemoryCgroup(1, nested, nested, 600 * MB)
    assert found.describe().endswith("nested/memory.limit_in_bytes)")


def test_v1_unlimited(tmp_path: Path) -> None:
    host = Host(tmp_path, "4:memory:/a\n", V1_MOUNTS)
    host.write("memory/memory.limit_in_bytes", V1_UNLIMITED)
    host.write("memory/a/memory.limit_in_bytes", V1_UNLIMITED)
    found = host.find()
    assert found is not None and found.limit is None and found.version == 1


def test_v1_container_without_a_cgroup_namespace(tmp_path: Path) -> None:
    """Docker on cgroup v1: /proc/self/cgroup names the host's path, and the
    container's own group is bind-mounted at the mount point."""
    mounts = [("cgroup cgroup rw,memory", "memory", "/docker/0123abcd")]
    host = Host(tmp_path, "9:memory:/docker/0123abcd\n", mounts)
    host.write("memory/memory.limit_in_bytes", f"{512 * MB}\n")
    host.write("memory/memory.stat", f"cache 0\nhierarchical_memory_limit {512 * MB}\n")
    found = host.find()
    assert found == MemoryCgroup(1, host.root / "memory", host.root / "memory", 512 * MB)


def test_v1_a_tighter_limit_above_what_the_mount_shows(tmp_path: Path) -> None:
    mounts = [("cgroup cgroup rw,memory", "memory", "/kubepods/pod1/ctr")]
    host = Host(tmp_path, "9:memory:/kubepods/pod1/ctr\n", mounts)
    host.write("memory/memory.limit_in_bytes", V1_UNLIMITED)
    host.write("memory/memory.stat", f"hierarchical_memory_limit {400 * MB}\n")  # the pod's
    found = host.find()
    assert found is not None and found.limit == 400 * MB


def test_hybrid_host_the_v1_memory_controller_wins(tmp_path: Path) -> None:
    """systemd's hybrid layout: cgroup2 at unified/ without the memory controller."""
    mounts = [*V1_MOUNTS, ("cgroup2 cgroup2 rw", "unified", "/")]
    host = Host(tmp_path, "4:memory:/app\n0::/app\n", mounts)
    host.write("unified/app/cgroup.procs", "1\n")
    host.write("memory/app/memory.limit_in_bytes", f"{900 * MB}\n")
    found = host.find()
    assert found is not None and (found.version, found.limit) == (1, 900 * MB)


def test_no_memory_controller_anywhere(tmp_path: Path) -> None:
    host = Host(tmp_path, "0::/app\n", [("cgroup2 cgroup2 rw", "", "/")])
    host.write("cgroup.controllers", "cpu pids\n")
    host.write("app/cgroup.procs", "1\n")
    assert host.find() is None


def test_no_mountinfo_guesses_the_layout_under_cgroup_root(tmp_path: Path) -> None:
    """A fake tree (or an odd mount): v2 at cgroup_root, v1 at cgroup_root/memory."""
    (tmp_path / "memory.max").write_text(f"{2 * 1024 * MB}\n")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text("0::/\n")
    found = find_memory_cgroup(str(tmp_path), str(proc))
    assert found is not None and found.limit == 2048 * MB
    assert find_memory_cgroup(str(tmp_path / "missing"), str(tmp_path / "missing")) is None


@pytest.mark.parametrize(
    ("version", "files", "expected"),
    [
        (
            2,
            {
                "memory.current": f"{500 * MB}\n",
                "memory.stat": f"anon {300 * MB}\nfile {200 * MB}\ninactive_file {150 * MB}\n",
                "memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
            },
            Usage(500 * MB, 150 * MB, 1),
        ),
        (
            1,
            {
                "memory.usage_in_bytes": f"{500 * MB}\n",
                # the group's own inactive_file, and its subtree's: the total counts
                "memory.stat": f"inactive_file {10 * MB}\ntotal_inactive_file {120 * MB}\n",
                "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
            },
            Usage(500 * MB, 120 * MB, 2),
        ),
        (2, {}, None),  # a fake tree without usage: the master estimates from its children
    ],
    ids=["v2", "v1", "unreadable"],
)
def test_usage_less_inactive_page_cache(
    version: int, files: dict[str, str], expected: Usage | None, tmp_path: Path
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    usage = MemoryCgroup(version, tmp_path, tmp_path, 600 * MB).read()
    assert usage == expected
    if usage is not None:
        assert usage.working_set == usage.usage - usage.inactive_file


def test_this_machine_if_it_has_a_memory_cgroup() -> None:
    """The real /proc and /sys: whatever is found is a folder with a limit file."""
    found = find_memory_cgroup()
    if found is None:
        pytest.skip("no memory cgroup on this machine")
    assert found.own.is_dir() and found.limited in (found.own, *found.own.parents)
    assert found.read() is not None


@pytest.mark.parametrize("text", ["²\n", "6\u0663\n", "١٢٣\n", "12 MB\n", "-5\n"])
def test_a_limit_or_usage_not_in_ascii_digits_is_reported_and_ignored(
    text: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """str.isdigit() accepts "²", which int() refuses: one such file made the
    master fail at start and ``jobmaster check`` crash (issue 23, item 6)."""
    host = Host(tmp_path, "0::/jobs\n", V2_MOUNT)
    host.write("cgroup.controllers", "memory\n")
    host.write("jobs/memory.max", text)
    host.write("jobs/memory.current", text)
    host.write("jobs/memory.stat", f"inactive_file {text}anon 5\n")
    with caplog.at_level("WARNING", logger="jobmaster.cgroups"):
        found = host.find()
        assert found == MemoryCgroup(2, host.root / "jobs", host.root / "jobs", None)
        assert found.read() is None
        limited = MemoryCgroup(2, host.root / "jobs", host.root / "jobs", 600 * MB)
        host.write("jobs/memory.current", f"{100 * MB}\n")
        assert limited.read() == Usage(100 * MB, 0, None)
    assert "unreadable cgroup file" in caplog.text and "memory.max" in caplog.text
