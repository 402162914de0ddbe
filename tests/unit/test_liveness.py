"""Judging a heartbeat's process dead only when it provably is (liveness.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobmaster import liveness

pytestmark = pytest.mark.skipif(not liveness.locus(), reason="needs Linux's /proc")


def heartbeat(pid: int, started: int | None = None, locus: str | None = None) -> dict[str, str]:
    return {
        "locus": liveness.locus() if locus is None else locus,
        "pid": str(pid),
        "pid_started": str(liveness.started_at(pid) if started is None else started),
    }


def test_a_live_process_of_this_machine_is_not_dead() -> None:
    assert not liveness.provably_dead(heartbeat(os.getpid()))


def test_a_process_that_exited_and_was_reaped_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    fields = heartbeat(child.pid)
    assert not liveness.provably_dead(fields)
    child.kill()
    child.wait()
    assert liveness.provably_dead(fields)


def test_a_zombie_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    fields = heartbeat(child.pid)
    os.kill(child.pid, 9)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped
    try:
        assert liveness.provably_dead(fields)
    finally:
        child.wait()


def gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_dead_child_of_a_live_master_is_its_master_s_to_requeue() -> None:
    """Judged dead, a sibling's scan would requeue it before the master,
    without counting the crash (poison pills)."""
    child = heartbeat(gone_pid(), started=1)
    assert liveness.provably_dead(child)
    alive_master = {
        "master_pid": str(os.getpid()),
        "master_started": str(liveness.started_at(os.getpid())),
    }
    assert not liveness.provably_dead({**child, **alive_master})
    dead_master = {"master_pid": str(gone_pid()), "master_started": "1"}
    assert liveness.provably_dead({**child, **dead_master})
    assert not liveness.provably_dead({**child, "master_pid": dead_master["master_pid"]})


def test_a_reused_pid_is_another_process_so_the_first_is_dead() -> None:
    assert liveness.provably_dead(heartbeat(os.getpid(), started=(liveness.started_at(1) or 0) - 1))


@pytest.mark.parametrize(
    "fields",
    [
        {"locus": "another-boot/4026531836", "pid": "999999999", "pid_started": "1"},
        {"pid": "999999999", "pid_started": "1"},  # an older heartbeat: no locus
        {"locus": "", "pid": "999999999", "pid_started": "1"},
        {"pid_started": "1"},
        {"pid": "not a pid", "pid_started": "1"},
    ],
)
def test_anything_not_provably_ours_and_gone_counts_as_alive(fields: dict[str, str]) -> None:
    assert not liveness.provably_dead(fields)
    ours = {**fields, "locus": liveness.locus()}
    if "pid" in fields and fields["pid"].isdigit():
        assert liveness.provably_dead(ours)  # the same, with our locus: judged


def test_off_linux_nothing_is_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = heartbeat(os.getpid(), started=1)
    assert liveness.provably_dead(dead)
    monkeypatch.setattr(liveness, "locus", lambda: "")
    assert not liveness.provably_dead(dead)


def test_a_process_we_cannot_read_is_not_judged_dead(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc mounted with hidepid hides other users' processes: the kernel
    still says they exist, and that wins."""
    dead = heartbeat(os.getpid(), started=1)  # would be "another process" if read
    monkeypatch.setattr(liveness, "_stat", lambda pid: None)
    assert not liveness.provably_dead(dead)


def test_start_times_are_ticks_since_boot_not_wall_clock() -> None:
    """A clock stepped by NTP must not make a live process look like another."""
    ticks = liveness.started_at(os.getpid())
    assert isinstance(ticks, int) and 0 < ticks < os.sysconf("SC_CLK_TCK") * 10**8


@pytest.mark.parametrize(
    "pid",
    ["99999999999999999999", "0", "-1", "-5", "+3", "1e9", " 12", "١٢", "9" * 5000],
)
def test_a_forged_pid_is_never_a_process_group_nor_an_overflow(pid: str) -> None:
    """A heartbeat of this machine with an absurd pid: judged without raising
    (a pid past the C range stopped a starting master with OverflowError), and
    never handed to kill() as 0 or a negative number (a process group)."""
    forged = {"locus": liveness.locus(), "pid": pid, "pid_started": "1"}
    judged = liveness.provably_dead(forged)
    assert judged is (pid in ("99999999999999999999", "9" * 5000))  # none can have it
