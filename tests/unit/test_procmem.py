"""A child's process tree, found and recorded (procmem.Descendants), with real processes."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jobmaster.procmem import Descendants, measure_mb
from tests.helpers import wait_until

# The middle process starts a leaf in a session of its own (a job's
# subprocess with start_new_session=True), writes its pid, and waits.
MIDDLE = """
import subprocess, sys, time
leaf = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                        start_new_session=True)
open(sys.argv[1], "w").write(str(leaf.pid))
time.sleep(60)
"""
ROOT = """
import subprocess, sys, time
middle = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
open(sys.argv[3], "w").write(str(middle.pid))
time.sleep(60)
"""


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[int, int, int]]:
    """(root, middle, leaf) pids; every one killed after."""
    leaf_file, middle_file = tmp_path / "leaf", tmp_path / "middle"
    root = subprocess.Popen([sys.executable, "-c", ROOT, MIDDLE, str(leaf_file), str(middle_file)])
    pids: list[int] = [root.pid]
    try:
        wait_until(lambda: leaf_file.exists() and leaf_file.read_text(), timeout=20)
        wait_until(lambda: middle_file.exists() and middle_file.read_text(), timeout=20)
        pids += [int(middle_file.read_text()), int(leaf_file.read_text())]
        yield pids[0], pids[1], pids[2]
    finally:
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        root.wait(timeout=10)


@pytest.mark.timeout(60)
def test_a_subprocess_in_its_own_session_is_found_and_kept_once_orphaned(
    tree: tuple[int, int, int],
) -> None:
    root, middle, leaf = tree
    assert psutil.Process(leaf).ppid() == middle
    assert _session(leaf) != _session(root)  # outside the child's group and session
    found = Descendants()
    assert sorted(found.update([root])[root]) == sorted([middle, leaf])
    psutil.Process(middle).kill()  # the leaf is re-parented: no ppid chain to root
    wait_until(lambda: psutil.Process(leaf).ppid() != middle, timeout=10)
    assert found.update([root])[root] == [leaf]  # still the root's doing
    assert (measure_mb(leaf, "uss") or 0) > 0
    assert found.kill(root) == [leaf]
    wait_until(
        lambda: (
            not psutil.pid_exists(leaf) or psutil.Process(leaf).status() == psutil.STATUS_ZOMBIE
        ),
        timeout=10,
    )
    assert found.update([]) == {} and found.known == {}


def _session(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
