"""The master's decisions, against a fake OS seam: no fork, no Redis.

``fork_child`` hands back made-up pids with a real pipe as the ready pipe;
``os.kill``/``os.killpg`` are recorded, never sent; recovery and Redis are
fakes that record what the master asked of them. The Redis thread is never
started: ``die`` gives it its turn in the test's own thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from jobmaster import exitcodes
from jobmaster.cgroups import MemoryCgroup
from jobmaster.config import Config
from jobmaster.identity import Identity
from jobmaster.keys import Keys
from jobmaster.metrics.hub import MetricsHub
from jobmaster.periodic import PeriodicTicker
from jobmaster.pipes import RequestReader
from jobmaster.poison import crash_triage
from jobmaster.recovery import RecoveryReport, Triage
from jobmaster.signals import MASTER_SIGNALS, SignalQueue
from jobmaster.slots import StartedSlots
from jobmaster.supervisor import master as master_module
from jobmaster.supervisor import memory_policy
from jobmaster.supervisor.backoff import FIRST_DELAY
from jobmaster.supervisor.build import build_master
from jobmaster.supervisor.children import (
    QUIET,
    RECYCLING,
    RETIRING,
    RUNNING,
    STARTING,
    STOPPING,
    Child,
    ChildTable,
)
from jobmaster.supervisor.duties import DeadChild, RedisDuties
from jobmaster.supervisor.history import HistoryRecorder
from jobmaster.supervisor.master import Master
from jobmaster.supervisor.memory import MemoryWatch
from jobmaster.supervisor.memory_policy import MemoryPolicy
from jobmaster.supervisor.spawn import Forked
from jobmaster.supervisor.stopping import STOP_MARGIN, Stopper

# Above Linux's largest pid_max (2**22): were a call to leak past the fakes,
# it would reach no process at all.
FIRST_FAKE_PID = 5_000_001
NOBODY_LISTENS = "redis://127.0.0.1:1/0"  # never the shared Redis, even by mistake


class FakeRecovery:
    def __init__(self) -> None:
        self.requeued: list[tuple[str, Triage | None]] = []
        self.forgotten: list[str] = []
        self.failures_to_come = 0

    def requeue_all(self, identity: str, *, triage: Triage | None = None) -> RecoveryReport:
        if self.failures_to_come:
            self.failures_to_come -= 1
            raise redis.ConnectionError("Connection refused")
        self.requeued.append((identity, triage))
        return RecoveryReport(requeued=["jid-1"])

    def forget(self, identity: str) -> None:
        self.forgotten.append(identity)


class FakeRedis:
    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.control: list[bytes] = []  # the master's remote control list
        self.heartbeats: list[dict[str, Any]] = []  # each HSET of the master's heartbeat
        self.removed: list[tuple[str, str]] = []  # SREMs: (set, member)

    def delete(self, *keys: str) -> int:
        self.deleted.extend(keys)
        return len(keys)

    def srem(self, key: str, *members: str) -> int:
        self.removed.extend((key, member) for member in members)
        return len(members)

    def srandmember(self, key: str, count: int) -> list[bytes]:
        return []  # the masters set, pruned by the Redis thread: nothing to prune here

    def pipeline(self, transaction: bool = True) -> FakePipeline:
        return FakePipeline(self)


class FakePipeline:
    """The Redis thread's control read and heartbeat: one reply per command."""

    def __init__(self, redis: FakeRedis) -> None:
        self.redis = redis
        self.replies: list[Any] = []

    def register_script(self, script: str) -> Any:
        """CONTROL_POP (control.py): each entry taken, as its length and head."""

        def control_pop(keys: list[str], args: list[int], client: Any) -> None:
            count, keep = args
            taken, self.redis.control[:count] = self.redis.control[:count], []
            self.replies.append([x for raw in taken for x in (len(raw), raw[:keep])])

        return control_pop

    def sadd(self, key: str, *members: str) -> None:
        self.replies.append(len(members))

    def hset(self, key: str, mapping: dict[str, Any]) -> None:
        self.redis.heartbeats.append(mapping)
        self.replies.append(len(mapping))

    def expire(self, key: str, seconds: int) -> None:
        self.replies.append(True)

    def execute(self) -> list[Any]:
        return self.replies


class FakeNotifier:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, message: str) -> None:
        self.sent.append(message)

    def watchdog(self) -> None:
        pass


class Harness:
    """A Master built from fakes through its constructor, and what it did recorded.

    ``limit_mb``, ``container_mb`` and ``cgroup``: the memory policy's limits
    (none by default: the machine's own cgroup would make the container's
    usage real; the memory tests give sizes, and the master sums them).
    ``metrics_port``: with a metrics hub, as ``build_master`` makes one.
    """

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        processes: int,
        *,
        limit_mb: float = 0.0,
        container_mb: float | None = None,
        cgroup: MemoryCgroup | None = None,
        metrics_port: int = 0,
    ) -> None:
        config = Config()
        config.redis_url = NOBODY_LISTENS
        config.processes = processes
        config.shutdown_timeout = 10.0
        config.max_crashes = 3
        config.crash_queue = ""
        config.metrics_port = metrics_port
        config.cgroup_root = "/nonexistent/cgroup"  # build_master's: never the machine's own
        self.forks: list[tuple[int, list[int]]] = []  # (index, fds closed in the child)
        self.forked_quiet: list[bool] = []  # told at fork that the pool is quiet
        self.kills: list[tuple[int, int]] = []
        self.killpgs: list[tuple[int, int]] = []
        self.write_ends: dict[int, int] = {}  # pid -> write end of its ready pipe
        self.request_ends: dict[int, int] = {}  # pid -> read end of its request pipe
        self.slots: dict[int, StartedSlots] = {}  # pid -> its started slots
        self._next_pid = FIRST_FAKE_PID
        monkeypatch.setattr(master_module, "fork_child", self.fork_child)
        monkeypatch.setattr("jobmaster.supervisor.stopping.os.kill", self.kill)
        monkeypatch.setattr("jobmaster.supervisor.master.os.killpg", self.killpg)
        self.recovery = FakeRecovery()
        self.redis = FakeRedis()
        self.notifier = FakeNotifier()
        self.keys = Keys(config.namespace)
        nobody = redis.Redis.from_url(NOBODY_LISTENS)  # periodic jobs, history: never run here
        children = ChildTable(wanted=processes)
        stopper = Stopper(config, children)
        watch = MemoryWatch(limit_mb, container_mb, config.memory_check_interval)
        metrics = None
        if metrics_port:
            metrics = MetricsHub(config, children, lambda: children.wanted, nobody)
        identity = str(Identity())
        duties = RedisDuties(
            config=config,
            client=self.redis,  # type: ignore[arg-type]
            keys=self.keys,
            identity=identity,
            recovery=self.recovery,  # type: ignore[arg-type]
            ticker=PeriodicTicker(nobody, self.keys, ()),
            history=HistoryRecorder(nobody, self.keys),
            queue_watch=metrics.queue_watch if metrics is not None else None,
            max_child_mb=limit_mb,
        )
        self.master = Master(
            config=config,
            identity=identity,
            children=children,
            stopper=stopper,
            memory=MemoryPolicy(config, watch, cgroup, children, stopper),
            duties=duties,
            signals=SignalQueue(MASTER_SIGNALS, wakeup=True),
            notifier=self.notifier,  # type: ignore[arg-type]
            metrics=metrics,
        )

    # -- the seams -------------------------------------------------------
    def fork_child(
        self,
        config: Config,
        index: int,
        close_in_child: Any = (),
        metrics: Any = None,
        quiet: bool = False,
    ) -> Forked:
        assert config is self.master.config
        pid, self._next_pid = self._next_pid, self._next_pid + 1
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        self.write_ends[pid] = write_end
        self.forks.append((index, list(close_in_child)))
        self.forked_quiet.append(quiet)
        requests_read, requests_write = os.pipe()
        os.set_blocking(requests_write, False)
        self.request_ends[pid] = requests_read
        self.slots[pid] = StartedSlots(config.concurrency)
        return Forked(
            pid=pid,
            identity=f"h:{pid}:n",
            ready_fd=read_end,
            requests_fd=requests_write,
            slots=self.slots[pid],
        )

    def requests_to(self, child: Child) -> list[tuple[str, str]]:
        """What the master asked of ``child`` on its request pipe."""
        return RequestReader(self.request_ends[child.pid]).read()

    def kill(self, pid: int, signum: int) -> None:
        assert pid >= FIRST_FAKE_PID, f"a real pid {pid} almost got signal {signum}"
        self.kills.append((pid, signum))

    def killpg(self, pgid: int, signum: int) -> None:
        assert pgid >= FIRST_FAKE_PID, f"a real group {pgid} almost got signal {signum}"
        self.killpgs.append((pgid, signum))

    # -- driving it ------------------------------------------------------
    def children(self) -> list[Child]:
        return sorted(self.master.children, key=lambda c: (c.index, c.pid))

    def child(self, index: int, state: str | None = None) -> Child:
        found = [
            c for c in self.children() if c.index == index and (state is None or c.state == state)
        ]
        assert len(found) == 1, found
        return found[0]

    def ready(self, child: Child) -> None:
        """The child writes its byte, the master's select finds it readable."""
        os.write(self.write_ends[child.pid], b"R")
        self.master.read_ready(child)

    def start_all(self) -> list[Child]:
        self.master.spawn_missing()
        for child in self.children():
            if child.state == STARTING:
                self.ready(child)
        return self.children()

    def die(self, child: Child, status: int) -> None:
        """What ``reap`` does for one of ours, then the Redis thread's requeue
        and the loop taking its news (the metrics count the requeue)."""
        assert self.master.children.pop(child.pid) is child
        self.master.child_exited(child, status)
        self.requeue()

    def requeue(self) -> list[RecoveryReport]:
        reports = self.master.duties.requeue_due(time.monotonic() + 5.0)
        self.master.take_news()
        return reports

    def signals_to(self, child: Child) -> list[int]:
        return [signum for pid, signum in self.kills if pid == child.pid]

    def close(self) -> None:
        for child in self.master.children:
            if child.ready_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(child.ready_fd)
        for fd in self.write_ends.values():
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def make_harness(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Harness]]:
    """Harnesses of three children, with the memory limits given."""
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    built: list[Harness] = []

    def make(**memory: Any) -> Harness:
        built.append(Harness(monkeypatch, processes=3, **memory))
        return built[-1]

    try:
        yield make
    finally:
        for harness in built:
            harness.close()


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    return make_harness()


def killed_by(signum: int) -> int:
    status = int(signum)
    assert os.WIFSIGNALED(status)
    return status


def exited_with(code: int) -> int:
    status = code << 8
    assert os.WIFEXITED(status)
    return status


def long_lived(child: Child) -> Child:
    """As if it had been serving for a minute: its death is not "right after start"."""
    child.started_at = time.monotonic() - 61.0
    child.ready_at = time.monotonic() - 60.0
    return child


# -- starting --------------------------------------------------------------
def test_spawn_missing_forks_one_child_per_process_with_indexes_1_to_n(harness: Harness) -> None:
    harness.master.spawn_missing()
    children = harness.children()
    assert [c.index for c in children] == [1, 2, 3]
    assert [index for index, _ in harness.forks] == [1, 2, 3]
    assert all(c.state == STARTING for c in children)
    assert all(c.ready_fd is not None for c in children)
    assert [c.identity for c in children] == [f"h:{c.pid}:n" for c in children]
    # each child closes the master's ends of the pipes of those forked before it
    assert harness.forks[2][1][:4] == [
        children[0].ready_fd,
        children[0].requests_fd,
        children[1].ready_fd,
        children[1].requests_fd,
    ]
    harness.master.spawn_missing()
    assert len(harness.forks) == 3  # nothing missing: nothing forked
    assert harness.kills == []


def test_ready_child_runs_and_ready_is_announced_once_all_are_up(harness: Harness) -> None:
    harness.master.spawn_missing()
    first, second, third = harness.children()
    harness.ready(first)
    harness.ready(second)
    assert (first.state, second.state, third.state) == (RUNNING, RUNNING, STARTING)
    assert first.ready_fd is not None  # kept open: "M" (max jobs) comes the same way
    assert harness.notifier.sent == []
    harness.ready(third)
    assert harness.notifier.sent == ["READY=1\nSTATUS=3/3 children"]


def test_a_child_ready_while_quiet_is_quieted(harness: Harness) -> None:
    harness.master.spawn_missing()
    harness.master.set_quiet(True)
    harness.kills.clear()
    child = harness.child(1)
    harness.ready(child)
    assert child.state == QUIET
    assert harness.signals_to(child) == [signal.SIGTSTP]


def test_a_child_forked_quiet_and_ready_after_a_resume_is_resumed(harness: Harness) -> None:
    """It started quiet; the CONT sent while it started may have come before
    its handlers: at ready, the master says the pool's state again."""
    harness.master.set_quiet(True)
    harness.master.spawn_missing()
    child = harness.child(1)
    harness.master.set_quiet(False)
    harness.kills.clear()
    harness.ready(child)
    assert child.state == RUNNING
    assert harness.signals_to(child) == [signal.SIGCONT]
    harness.start_all()  # the others forked quiet too
    harness.master.handle_sigttin()
    harness.master.spawn_missing()  # one forked while the pool runs: nothing to say
    harness.kills.clear()
    harness.start_all()
    assert harness.kills == []


def test_a_ready_pipe_closed_without_a_byte_leaves_the_child_starting(harness: Harness) -> None:
    harness.master.spawn_missing()
    child = harness.child(1)
    os.close(harness.write_ends.pop(child.pid))  # died before it was up: EOF
    harness.master.read_ready(child)
    assert child.state == STARTING
    assert child.ready_fd is None


# -- children dying --------------------------------------------------------
def test_unexpected_death_requeues_with_crash_triage_and_backs_off(harness: Harness) -> None:
    harness.start_all()
    child = harness.child(2)
    harness.slots[child.pid].mark(0, b"the job it ran")
    before = time.monotonic()
    harness.die(child, killed_by(signal.SIGKILL))

    assert len(harness.recovery.requeued) == 1
    identity, triage = harness.recovery.requeued[0]
    assert identity == child.identity
    assert triage is not None
    payload, reason = triage(b"the job it ran", {"jid": "j", "queue": "default"})
    assert (payload["crash_count"], payload["crash_cause"], reason) == (1, "SIGKILL", None)
    assert harness.recovery.forgotten == [child.identity]
    assert harness.redis.deleted == [harness.keys.heartbeat(child.identity)]
    assert harness.master.duties.pending() == ()
    assert harness.killpgs == [(child.pid, signal.SIGKILL)]  # what its jobs left behind

    # it died right after start: its slot is refilled after the backoff, not at once
    assert before + FIRST_DELAY <= harness.master.respawns.at[2] <= time.monotonic() + FIRST_DELAY
    harness.master.spawn_missing()
    assert len(harness.forks) == 3
    harness.master.respawns.at[2] = time.monotonic() - 0.001  # the backoff has passed
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks] == [1, 2, 3, 2]
    assert 2 not in harness.master.respawns.at
    assert harness.master.exit_code == exitcodes.OK
    assert not harness.master.stopping


def test_repeated_early_deaths_back_off_longer(harness: Harness) -> None:
    harness.master.spawn_missing()
    delays = []
    for _ in range(3):
        child = harness.child(1)
        harness.die(child, exited_with(1))
        delays.append(harness.master.respawns.at[1] - time.monotonic())
        harness.master.respawns.at[1] = 0.0
        harness.master.spawn_missing()
    assert delays[0] == pytest.approx(0.1, abs=0.05)
    assert delays[1] == pytest.approx(0.2, abs=0.05)
    assert delays[2] == pytest.approx(0.4, abs=0.05)


def test_death_after_a_healthy_life_is_replaced_at_once(harness: Harness) -> None:
    harness.start_all()
    child = long_lived(harness.child(3))
    harness.die(child, killed_by(signal.SIGSEGV))
    assert harness.recovery.requeued[0][1] is not None  # still a crash
    assert 3 not in harness.master.respawns.at
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks] == [1, 2, 3, 3]


def test_expected_exit_requeues_without_triage_and_no_backoff(harness: Harness) -> None:
    harness.start_all()
    child = harness.child(1)
    child.state = STOPPING
    harness.die(child, exited_with(0))
    assert harness.recovery.requeued == [(child.identity, None)]
    assert harness.master.respawns.at == {}
    assert harness.master.respawns.backoff == {}


def test_expected_death_by_signal_is_not_a_crash_either(harness: Harness) -> None:
    harness.start_all()
    child = harness.child(1)
    harness.master.stopper.stop(child, "test")
    harness.die(child, killed_by(signal.SIGKILL))  # e.g. stop_overdue's SIGKILL
    assert harness.recovery.requeued == [(child.identity, None)]
    assert harness.master.respawns.at == {}


def test_app_import_failure_halts_instead_of_fork_looping(harness: Harness) -> None:
    harness.master.spawn_missing()
    failed, *others = harness.children()
    harness.die(failed, exited_with(exitcodes.APP_LOAD_FAILED))
    assert harness.master.exit_code == exitcodes.APP_LOAD_FAILED
    assert harness.master.stopping
    assert harness.recovery.requeued[0][0] == failed.identity
    assert harness.recovery.requeued[0][1] is not None
    for child in others:
        assert harness.signals_to(child) == [signal.SIGTERM]
        assert child.state == STOPPING
    assert harness.signals_to(failed) == []
    assert harness.notifier.sent == ["STOPPING=1"]
    assert harness.master.respawns.at == {}


def test_exit_0_of_a_child_not_stopped_is_not_a_crash_but_is_replaced(harness: Harness) -> None:
    harness.start_all()
    child = long_lived(harness.child(2))
    harness.die(child, exited_with(0))
    assert harness.recovery.requeued == [(child.identity, None)]
    assert harness.master.exit_code == exitcodes.OK
    assert not harness.master.stopping
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks] == [1, 2, 3, 2]


def test_exit_0_right_after_start_is_replaced_after_the_backoff(harness: Harness) -> None:
    harness.start_all()
    child = harness.child(2)
    harness.die(child, exited_with(0))
    assert harness.recovery.requeued == [(child.identity, None)]
    assert 2 in harness.master.respawns.at
    harness.master.respawns.at[2] = 0.0
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks] == [1, 2, 3, 2]


def test_reap_collects_ours_and_strangers(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.start_all()
    child = harness.child(1)
    statuses = [(child.pid, killed_by(signal.SIGKILL)), (4_999_999, 0), (0, 0)]
    monkeypatch.setattr(
        "jobmaster.supervisor.master.os.waitpid", lambda pid, options: statuses.pop(0)
    )
    harness.master.reap()
    assert statuses == []
    assert child.pid not in harness.master.children.by_pid
    assert len(harness.master.children) == 2
    assert harness.recovery.requeued == []  # the Redis thread's work, not the loop's
    harness.requeue()
    assert harness.recovery.requeued[0][0] == child.identity


def test_reap_stops_when_there_are_no_children(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_children(pid: int, options: int) -> tuple[int, int]:
        raise ChildProcessError

    monkeypatch.setattr("jobmaster.supervisor.master.os.waitpid", no_children)
    harness.master.reap()  # returns, raises nothing
    assert harness.recovery.requeued == []


def record_select_timeouts(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    timeouts: list[float] = []

    def fake_select(
        read: list[int], write: list[int], error: list[int], timeout: float
    ) -> tuple[list[int], list[int], list[int]]:
        timeouts.append(timeout)
        return [], [], []

    monkeypatch.setattr(master_module, "select", SimpleNamespace(select=fake_select))
    return timeouts


def test_a_remote_command_wakes_the_loop_at_once(harness: Harness) -> None:
    """The Redis thread reads the control list every CONTROL_INTERVAL; what it
    read wakes the loop's select through its pipe, not after an idle second."""
    children = harness.start_all()
    harness.redis.control.append(b"quiet")
    harness.master.duties.talk(time.monotonic())  # the Redis thread's read
    started = time.monotonic()
    harness.master.wait()  # the real select, up to a second
    assert time.monotonic() - started < 0.5
    harness.master.take_news()
    assert is_quiet(harness.master)
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGTSTP) for c in children)


def test_a_remote_stop_is_graceful_with_an_exit_code_of_its_own(harness: Harness) -> None:
    """Exit 0 after a stop pushed into Redis kept ``Restart=on-failure`` from
    bringing the master back: whoever could write the list stopped it for
    good. REMOTE_STOP lets the service manager choose."""
    children = harness.start_all()
    harness.redis.control.append(b"stop")
    harness.master.duties.talk(time.monotonic())
    harness.master.take_news()
    assert harness.master.stopping
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGTERM) for c in children)
    assert harness.master.exit_code == exitcodes.REMOTE_STOP


def test_the_masters_start_up_scan_is_fenced_like_the_childrens(harness: Harness) -> None:
    """A heartbeat deleted just as a master starts must not make its scan
    requeue a live worker's jobs (recovery.py's fence)."""
    master = build_master(harness.master.config)
    assert master.duties.recovery.silent_grace == harness.master.config.heartbeat_ttl / 2


def test_a_remote_stop_during_a_stop_leaves_its_exit_code(harness: Harness) -> None:
    harness.start_all()
    harness.master.begin_stop("SIGTERM")
    harness.redis.control.append(b"stop")
    harness.master.duties.talk(time.monotonic())
    harness.master.take_news()
    assert harness.master.exit_code == exitcodes.OK


def test_the_heartbeat_shows_the_state_the_loop_published(harness: Harness) -> None:
    children = harness.start_all()
    harness.master.handle_sigttin()
    harness.master.set_quiet(True)
    harness.master.publish()
    harness.master.duties.talk(time.monotonic())
    [beat] = harness.redis.heartbeats
    assert beat["processes"] == 4
    assert beat["quiet"] == 1
    assert beat["children"] == ",".join(c.identity for c in children)
    assert beat["role"] == "master"
    harness.master.duties.talk(time.monotonic())  # read the list again, no beat yet
    assert len(harness.redis.heartbeats) == 1


def test_wait_wakes_up_for_a_due_respawn(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    timeouts = record_select_timeouts(monkeypatch)
    harness.start_all()
    harness.master.wait()
    harness.die(harness.child(1), killed_by(signal.SIGKILL))
    harness.master.wait()
    assert timeouts[0] == 1.0  # nothing to do: the loop's usual second
    assert 0.0 < timeouts[1] <= FIRST_DELAY  # no longer than the backoff


def test_ttou_below_a_slot_in_backoff_does_not_make_the_loop_spin(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeouts = record_select_timeouts(monkeypatch)
    harness.start_all()
    harness.die(harness.child(3), exited_with(1))  # right after start: back in 0.1 s
    harness.master.handle_sigttou()  # the operator shrinks the pool meanwhile
    assert harness.kills == []  # two serving children are what is wanted now
    harness.master.respawns.at[3] = time.monotonic() - 0.001  # the backoff has passed
    for _ in range(3):  # a few turns of the loop
        harness.master.spawn_missing()
        harness.master.wait()
    assert len(harness.forks) == 3  # slot 3 is not wanted any more
    assert min(timeouts) > 0.5


# -- Redis away ------------------------------------------------------------
def test_redis_error_keeps_the_dead_childs_list_pending_until_it_works(harness: Harness) -> None:
    harness.start_all()
    child = harness.child(1)
    harness.slots[child.pid].mark(0, b"the job it ran")
    harness.recovery.failures_to_come = 1
    harness.die(child, killed_by(signal.SIGKILL))
    assert harness.recovery.requeued == []
    [pending] = harness.master.duties.pending()
    assert (pending.identity, pending.crashed) == (child.identity, True)
    assert harness.recovery.forgotten == []

    assert [report.requeued for report in harness.requeue()] == [["jid-1"]]
    assert harness.master.duties.pending() == ()
    identity, triage = harness.recovery.requeued[0]
    assert identity == child.identity
    assert triage is not None  # still treated as the crash it was
    assert (
        triage(b"the job it ran", {"jid": "j", "queue": "default"})[0]["crash_cause"] == "SIGKILL"
    )
    assert harness.recovery.forgotten == [child.identity]


def test_requeues_keep_order_and_stop_at_the_first_error(harness: Harness) -> None:
    duties = harness.master.duties
    crash = crash_triage(3, "", "SIGKILL", "died")
    first = DeadChild("a", "child 1 (pid 1)", None, False, time.monotonic())
    second = DeadChild("b", "child 2 (pid 2)", crash, True, time.monotonic())
    duties.requeue(first)
    duties.requeue(second)
    harness.recovery.failures_to_come = 1
    assert harness.requeue() == []
    assert duties.pending() == (first, second)
    assert len(harness.requeue()) == 2
    assert [identity for identity, _ in harness.recovery.requeued] == ["a", "b"]
    assert harness.recovery.requeued[0][1] is None
    assert harness.recovery.requeued[1][1] is crash  # the master's triage, unchanged


# -- pool size: TTIN / TTOU ------------------------------------------------
def test_ttin_wants_one_more_child(harness: Harness) -> None:
    harness.start_all()
    harness.master.handle_sigttin()
    assert harness.master.wanted == 4
    assert harness.kills == []
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks] == [1, 2, 3, 4]


def test_ttou_wants_one_fewer_and_terms_the_highest_index(harness: Harness) -> None:
    harness.start_all()
    highest = harness.child(3)
    harness.master.handle_sigttou()
    assert harness.master.wanted == 2
    assert harness.kills == [(highest.pid, signal.SIGTERM)]
    assert highest.state == STOPPING
    harness.master.spawn_missing()
    assert len(harness.forks) == 3  # no replacement
    harness.die(highest, exited_with(0))
    assert harness.recovery.requeued == [(highest.identity, None)]
    harness.master.spawn_missing()
    assert len(harness.forks) == 3


def test_ttou_never_goes_below_one_child(harness: Harness) -> None:
    harness.start_all()
    harness.master.handle_sigttou()
    harness.master.handle_sigttou()
    harness.kills.clear()
    harness.master.handle_sigttou()
    assert harness.master.wanted == 1
    assert harness.kills == []


def test_signals_are_dispatched_by_name(harness: Harness) -> None:
    harness.start_all()
    for signum in (signal.SIGTTIN, signal.SIGTTIN, signal.SIGCHLD, signal.SIGTTOU):
        harness.master.signals.put(signum)
    harness.master.handle_signals()
    assert harness.master.wanted == 4
    assert harness.master.signals.get(timeout=0) is None


def test_usr1_is_forwarded_to_every_child(harness: Harness) -> None:
    children = harness.start_all()
    harness.master.signals.put(signal.SIGUSR1)
    harness.master.handle_signals()
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGUSR1) for c in children)


# -- rolling restart: HUP --------------------------------------------------
def test_hup_retires_serving_children_and_forks_replacements(harness: Harness) -> None:
    old = harness.start_all()
    harness.master.handle_sighup()
    assert all(c.state == RETIRING for c in old)
    assert harness.kills == []  # nobody stops before a replacement is up
    harness.master.spawn_missing()
    new = [c for c in harness.children() if c not in old]
    assert sorted(c.index for c in new) == [1, 2, 3]
    assert all(c.state == STARTING for c in new)


def test_each_ready_replacement_stops_one_retiring_child(harness: Harness) -> None:
    old = harness.start_all()
    harness.master.handle_sighup()
    harness.master.spawn_missing()
    new = [c for c in harness.children() if c not in old]

    harness.ready(new[0])
    assert harness.kills == [(old[0].pid, signal.SIGTERM)]
    assert old[0].state == STOPPING
    assert old[0].stop_reason == "replaced (HUP)"
    assert [c.state for c in old[1:]] == [RETIRING, RETIRING]

    harness.ready(new[1])
    harness.ready(new[2])
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGTERM) for c in old)
    assert harness.master.children.in_state(RETIRING) == []
    for child in old:
        harness.die(child, exited_with(0))
    assert all(triage is None for _, triage in harness.recovery.requeued)
    harness.master.spawn_missing()
    assert len(harness.forks) == 6


def test_hup_forks_a_slot_in_crash_backoff_at_once_and_retires_every_old_child(
    harness: Harness,
) -> None:
    """Otherwise the last old child serves on until the empty slot's backoff
    (up to 30 s) has passed and its new child is ready."""
    old = harness.start_all()
    crashed = harness.child(3)
    harness.die(crashed, killed_by(signal.SIGKILL))  # right after start: in backoff
    for _ in range(5):  # it kept crashing: the next fork is seconds away
        harness.master.respawns.backoff[3].delay_after_death(0.0)
    harness.master.respawns.at[3] = time.monotonic() + 30.0
    harness.master.handle_sighup()
    harness.master.spawn_missing()
    new = [c for c in harness.children() if c not in old]
    assert sorted(c.index for c in new) == [1, 2, 3]  # slot 3 too, without waiting
    for child in new:
        harness.ready(child)
    survivors = [c for c in old if c is not crashed]
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGTERM) for c in survivors)
    assert harness.master.children.in_state(RETIRING) == []
    harness.die(new[2], killed_by(signal.SIGKILL))  # crashing again right after start
    assert harness.master.respawns.at[3] - time.monotonic() <= FIRST_DELAY  # from the start


def test_a_child_forked_while_the_pool_is_quiet_starts_quiet(harness: Harness) -> None:
    """The TSTP it gets once ready would come after its threads could fetch."""
    harness.start_all()
    harness.master.set_quiet(True)
    harness.die(long_lived(harness.child(2)), killed_by(signal.SIGKILL))
    harness.master.spawn_missing()
    harness.master.set_quiet(False)
    harness.die(long_lived(harness.child(3)), killed_by(signal.SIGKILL))
    harness.master.spawn_missing()
    assert harness.forked_quiet == [False, False, False, True, False]


def test_hup_while_stopping_is_ignored(harness: Harness) -> None:
    harness.start_all()
    harness.master.begin_stop("SIGTERM")
    harness.master.handle_sighup()
    assert harness.master.children.in_state(RETIRING) == []


def test_two_hups_in_a_row_still_replace_every_child(harness: Harness) -> None:
    harness.start_all()
    harness.master.handle_sighup()
    harness.master.spawn_missing()
    harness.master.handle_sighup()  # e.g. two deploys in quick succession
    harness.master.spawn_missing()
    for child in harness.children():
        if child.ready_fd is not None:
            harness.ready(child)  # every generation comes up
    assert len(harness.master.children.serving()) == 3
    assert harness.master.children.in_state(RETIRING) == []


def test_ttou_during_a_rolling_restart_leaves_no_retiring_child(harness: Harness) -> None:
    old = harness.start_all()
    harness.master.handle_sighup()
    harness.master.spawn_missing()
    harness.master.handle_sigttou()
    for child in harness.children():
        if child not in old and child.state == STARTING:
            harness.ready(child)
    assert len(harness.master.children.serving()) == 2
    assert harness.master.children.in_state(RETIRING) == []


# -- stopping: TERM, INT, QUIT ---------------------------------------------
def test_sigterm_stops_every_child_gracefully(harness: Harness) -> None:
    children = harness.start_all()
    before = time.monotonic()
    harness.master.signals.put(signal.SIGTERM)
    harness.master.handle_signals()
    assert harness.master.stopping
    assert harness.notifier.sent[-1] == "STOPPING=1"
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGTERM) for c in children)
    for child in children:
        assert child.state == STOPPING
        assert child.stop_deadline is not None
        assert child.stop_deadline >= before + 10.0 + STOP_MARGIN
        assert child.stop_deadline <= time.monotonic() + 10.0 + STOP_MARGIN


def test_repeated_sigterm_sends_one_term_per_child(harness: Harness) -> None:
    children = harness.start_all()
    for _ in range(3):
        harness.master.signals.put(signal.SIGTERM)
    harness.master.handle_signals()
    deadlines = [c.stop_deadline for c in children]
    harness.master.handle_sigterm()
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGTERM) for c in children)
    assert [c.stop_deadline for c in children] == deadlines  # never shortened
    assert harness.notifier.sent.count("STOPPING=1") == 1


def test_first_sigint_is_graceful_second_sends_sigquit(harness: Harness) -> None:
    children = harness.start_all()
    harness.master.handle_sigint()
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGTERM) for c in children)
    harness.kills.clear()
    harness.master.handle_sigint()
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGQUIT) for c in children)
    for child in children:  # SIGKILL comes sooner now
        assert child.stop_deadline is not None
        assert child.stop_deadline <= time.monotonic() + STOP_MARGIN


def test_sigint_after_sigterm_is_not_yet_the_second_ctrl_c(harness: Harness) -> None:
    harness.start_all()
    harness.master.handle_sigterm()
    harness.kills.clear()
    harness.master.handle_sigint()
    assert harness.kills == []


def test_sigquit_stops_at_once(harness: Harness) -> None:
    children = harness.start_all()
    harness.master.handle_sigquit()
    assert harness.master.stopping
    for child in children:
        assert harness.signals_to(child) == [signal.SIGTERM, signal.SIGQUIT]


def test_stop_overdue_kills_a_stopping_child_past_its_deadline(harness: Harness) -> None:
    late, in_time, running = harness.start_all()
    harness.master.stopper.stop(late, "test")
    harness.master.stopper.stop(in_time, "test")
    late.stop_deadline = time.monotonic() - 0.001
    harness.kills.clear()
    harness.master.stopper.overdue()
    assert harness.kills == [(late.pid, signal.SIGKILL)]
    harness.master.stopper.overdue()  # once is enough
    assert harness.kills == [(late.pid, signal.SIGKILL)]
    assert running.state == RUNNING


def test_a_child_already_gone_when_signalled_is_left_to_the_reaper(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.start_all()

    def gone(pid: int, signum: int) -> None:
        raise ProcessLookupError

    monkeypatch.setattr("jobmaster.supervisor.stopping.os.kill", gone)
    harness.master.handle_sigterm()  # raises nothing
    assert all(c.state == STOPPING for c in harness.master.children)


# -- quiet: TSTP / CONT ------------------------------------------------------
def is_quiet(master: Master) -> bool:
    return master.quiet  # a call: mypy does not narrow it across the two checks


def test_set_quiet_forwards_tstp_then_cont(harness: Harness) -> None:
    children = harness.start_all()
    harness.master.signals.put(signal.SIGTSTP)
    harness.master.handle_signals()
    assert is_quiet(harness.master)
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGTSTP) for c in children)
    assert all(c.state == QUIET for c in children)
    harness.master.set_quiet(True)  # already quiet: nothing more sent
    assert len(harness.kills) == 3

    harness.kills.clear()
    harness.master.signals.put(signal.SIGCONT)
    harness.master.handle_signals()
    assert not is_quiet(harness.master)
    assert sorted(harness.kills) == sorted((c.pid, signal.SIGCONT) for c in children)
    assert all(c.state == RUNNING for c in children)


def test_quiet_while_stopping_sends_nothing(harness: Harness) -> None:
    harness.start_all()
    harness.master.begin_stop("SIGTERM")
    harness.kills.clear()
    harness.master.set_quiet(True)
    assert harness.kills == []


# -- the memory killer ---------------------------------------------------------
def sizes_for(monkeypatch: pytest.MonkeyPatch, sizes: dict[int, float]) -> None:
    monkeypatch.setattr(memory_policy, "measure_mb", lambda pid, metric: sizes.get(pid))


def check_memory_now(harness: Harness) -> None:
    harness.master.memory.next_check = 0.0
    harness.master.memory.check()


def test_a_child_over_its_limit_three_times_is_recycled_replacement_first(
    make_harness: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = make_harness(limit_mb=150)
    harness.master.config.memory_grace = 30.0
    children = harness.start_all()
    big = children[0]
    sizes_for(monkeypatch, {c.pid: 50.0 for c in children} | {big.pid: 200.0})
    for _ in range(2):
        check_memory_now(harness)
    assert big.state == RUNNING
    check_memory_now(harness)
    assert big.state == RECYCLING and big.memory_cause == "over max_child_mb 150 (uss)"
    # Asked on its pipe, with the limit it is over; never a signal, which a
    # platform may send to every process (and a child could not tell apart).
    assert harness.signals_to(big) == []
    assert harness.requests_to(big) == [("recycle", "over max_child_mb 150 (uss)")]
    assert big.stop_deadline is not None
    assert big.stop_deadline - time.monotonic() > 30.0 + 10.0  # grace + shutdown_timeout
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks].count(big.index) == 2  # replaced at once


def test_a_recycled_child_killed_after_its_grace_blames_its_jobs(
    make_harness: Callable[..., Harness],
) -> None:
    harness = make_harness(limit_mb=150)
    [child, *_] = harness.start_all()
    harness.master.memory.recycle(child, "uses 200 MB", "over max_child_mb 150 (uss)")
    harness.slots[child.pid].mark(1, b"the bloating job")
    harness.die(child, killed_by(signal.SIGKILL))
    [(identity, triage)] = harness.recovery.requeued
    assert identity == child.identity and triage is not None
    _, reason = triage(b"the bloating job", {"jid": "j", "crash_count": 2, "queue": "default"})
    assert reason == (
        "the worker process was recycled over its memory limit while running this job "
        "3 times: over max_child_mb 150 (uss)"
    )


def test_a_child_at_max_jobs_is_recycled_without_blame(harness: Harness) -> None:
    harness.master.config.max_jobs_per_child = 10
    [child, *_] = harness.start_all()
    os.write(harness.write_ends[child.pid], b"M")
    harness.master.read_ready(child)
    assert child.state == RECYCLING and child.memory_cause is None
    assert harness.signals_to(child) == []  # it quieted itself and stops once idle
    harness.die(child, exited_with(0))
    [(_, triage)] = harness.recovery.requeued
    assert triage is None


def test_the_container_guard_recycles_the_largest_once_at_a_time(
    make_harness: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = make_harness(container_mb=1000)
    children = harness.start_all()
    sizes_for(monkeypatch, {children[0].pid: 300.0, children[1].pid: 350.0, children[2].pid: 260.0})
    check_memory_now(harness)
    assert children[1].state == RECYCLING
    assert harness.signals_to(children[1]) == []
    [(verb, reason)] = harness.requests_to(children[1])
    assert verb == "recycle" and reason == "container memory guard (1000 MB)"
    check_memory_now(harness)  # still over, but one child is already leaving
    assert [c.state for c in (children[0], children[2])] == [RUNNING, RUNNING]


def test_the_last_line_kills_the_largest_child_and_blames_its_jobs_exactly(
    make_harness: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = make_harness(container_mb=1000)
    children = harness.start_all()
    big = children[1]
    sizes_for(monkeypatch, {children[0].pid: 300.0, big.pid: 400.0, children[2].pid: 260.0})
    check_memory_now(harness)  # 960 MB of 1000: past 95 %
    assert harness.signals_to(big) == [signal.SIGKILL]
    assert big.state == STOPPING and big.restart_reason == "memory"
    assert all(harness.signals_to(c) == [] for c in (children[0], children[2]))
    check_memory_now(harness)  # not reaped yet: no second kill
    assert [harness.signals_to(c) for c in children] == [[], [signal.SIGKILL], []]
    harness.slots[big.pid].mark(0, b"the bloating job")
    harness.die(big, killed_by(signal.SIGKILL))
    [(identity, triage)] = harness.recovery.requeued
    assert identity == big.identity and triage is not None
    _, reason = triage(b"the bloating job", {"jid": "j", "crash_count": 2})
    assert reason == (
        "the worker process was killed over the container's memory limit while running "
        "this job 3 times: container memory at 960 of 1000 MB"
    )
    assert triage(b"fetched, not started", {"jid": "k"}) == ({"jid": "k"}, None)
    # A kill is no crash, but backs off like one (never a kill loop): it
    # served under a second, so its slot waits out the first delay.
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks].count(big.index) == 1
    assert harness.master.respawns.waiting(big.index, time.monotonic())


def test_no_room_a_recycled_child_pushes_its_jobs_back_now(
    make_harness: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = make_harness(container_mb=1000)
    children = harness.start_all()
    sizes = {children[0].pid: 300.0, children[1].pid: 350.0, children[2].pid: 260.0}
    sizes_for(monkeypatch, sizes)
    check_memory_now(harness)  # 910: the guard recycles the largest
    assert [verb for verb, _ in harness.requests_to(children[1])] == ["recycle"]
    sizes[children[1].pid] = 380.0
    check_memory_now(harness)  # 940, and it still runs: no room to finish its jobs
    [(verb, reason)] = harness.requests_to(children[1])
    assert verb == "push-back" and reason == "940 MB of 1000 MB (94%)"
    assert children[1].stop_deadline is not None
    assert children[1].stop_deadline - time.monotonic() <= 5.0  # it goes now, or is killed
    check_memory_now(harness)
    assert harness.requests_to(children[1]) == []  # told once


def test_near_the_limit_a_replacement_waits_until_the_recycled_child_has_gone(
    make_harness: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = make_harness(container_mb=1000, limit_mb=200)
    children = harness.start_all()
    big = children[0]
    sizes = {big.pid: 260.0, children[1].pid: 200.0, children[2].pid: 200.0}
    sizes_for(monkeypatch, sizes)  # 660: under 70 %, replacement first
    for _ in range(3):
        check_memory_now(harness)
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks].count(big.index) == 2
    [replacement] = [c for c in harness.children() if c.index == big.index and c is not big]
    harness.ready(replacement)
    sizes.update({replacement.pid: 260.0, big.pid: 60.0})  # 720 with the old one: over 70 %
    for _ in range(3):
        check_memory_now(harness)
    assert replacement.state == RECYCLING
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks].count(big.index) == 2  # held back
    harness.die(replacement, exited_with(0))
    check_memory_now(harness)
    harness.master.spawn_missing()
    assert [index for index, _ in harness.forks].count(big.index) == 3  # it has gone


def test_between_samples_the_cgroup_usage_alone_brings_the_next_sample_forward(
    make_harness: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """memory_check_interval 5 s: three children leaking 20 MB/s took a 600 MB
    group from 50 % to the kernel's OOM kill between two samples."""
    harness = make_harness(
        container_mb=600, cgroup=MemoryCgroup(1, tmp_path, tmp_path, 600 * 2**20)
    )
    (tmp_path / "memory.usage_in_bytes").write_text(f"{300 * 2**20}\n")
    children = harness.start_all()
    sizes_for(monkeypatch, {c.pid: 50.0 for c in children})
    check_memory_now(harness)  # 50 %: the next sample in 5 s
    assert harness.master.memory.next_check - time.monotonic() > 4.0
    checked = harness.master.memory.last_check
    harness.master.memory.next_poll = 0.0
    harness.master.memory.check()
    assert harness.master.memory.last_check == checked  # still 50 %: no sample
    (tmp_path / "memory.usage_in_bytes").write_text(f"{450 * 2**20}\n")  # 75 %
    harness.master.memory.next_poll = 0.0
    harness.master.memory.last_check -= 0.5  # WATCH_INTERVAL ago
    harness.master.memory.check()
    assert harness.master.memory.last_check > checked  # sampled at once
    assert harness.master.memory.used_mb == 450
    assert harness.master.memory.next_check - time.monotonic() <= 0.5


def test_a_crash_blames_only_the_jobs_its_child_had_started(harness: Harness) -> None:
    """Poison pills are exact: fetched-but-not-started jobs are requeued as they
    were, and jobs that ran side by side become suspects, none counted."""
    [child, other, *_] = harness.start_all()
    harness.slots[child.pid].mark(0, b"alone")
    harness.slots[other.pid].mark(0, b"beside-1")
    harness.slots[other.pid].mark(2, b"beside-2")
    harness.die(child, killed_by(signal.SIGKILL))
    harness.die(other, killed_by(signal.SIGKILL))
    [(_, alone), (_, beside)] = harness.recovery.requeued
    assert alone is not None and beside is not None

    culprit, reason = alone(b"alone", {"jid": "a", "queue": "default"})
    assert culprit["crash_count"] == 1 and reason is None
    fetched, _ = alone(b"fetched only", {"jid": "f", "queue": "default"})
    assert "crash_count" not in fetched and "crash_suspect" not in fetched

    suspect, reason = beside(b"beside-1", {"jid": "b", "crash_count": 2, "queue": "default"})
    assert suspect == {
        "jid": "b",
        "crash_count": 2,  # not counted: it ran beside another
        "queue": "default",
        "crash_suspect": True,
        "interrupted_count": 1,  # but it ran: current_job().attempt counts the run
    }
    assert reason is None  # max_crashes is 3: a count would have buried it


def test_a_child_whose_start_hook_failed_is_a_crash_at_start_backed_off_not_a_halt(
    harness: Harness,
) -> None:
    """on_child_start raised (lifecycle.py): unlike an app that cannot import,
    it may work next time (its database was restarting), so the slot is forked
    again, ever slower, and the master carries on."""
    harness.master.spawn_missing()  # never ready: it died before its first job
    delays = []
    for _ in range(3):
        child = harness.child(1)
        harness.die(child, exited_with(exitcodes.CHILD_START_FAILED))
        delays.append(harness.master.respawns.at[1] - time.monotonic())
        harness.master.respawns.at[1] = 0.0
        harness.master.spawn_missing()
    assert delays[0] == pytest.approx(0.1, abs=0.05)
    assert delays[2] == pytest.approx(0.4, abs=0.05)
    assert not harness.master.stopping
    assert harness.master.exit_code == exitcodes.OK


def test_usage_held_high_by_the_rest_kills_and_blames_no_child(
    make_harness: Callable[..., Harness],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hole 4 (a): a fake v1 tree held at 960 of 1000 MB and children of 30 MB
    each: 48 memory kills and 49 forks in 10 s, an innocent job buried. The
    growth is not the children's: nothing is killed, recycled or blamed, and
    the log says what holds the memory."""
    usage = tmp_path / "memory.usage_in_bytes"
    usage.write_text(f"{100 * 2**20}\n")
    (tmp_path / "memory.stat").write_text(f"total_shmem {700 * 2**20}\n")
    harness = make_harness(
        container_mb=1000, cgroup=MemoryCgroup(1, tmp_path, tmp_path, 1000 * 2**20)
    )
    children = harness.start_all()
    sizes_for(monkeypatch, {c.pid: 30.0 for c in children})
    usage.write_text(f"{960 * 2**20}\n")  # a tmpfs file, a sidecar: not the children
    with caplog.at_level("WARNING", logger="jobmaster.supervisor.memory_policy"):
        for _ in range(50):
            check_memory_now(harness)
            for child in harness.children():
                if signal.SIGKILL in harness.signals_to(child):
                    harness.die(child, killed_by(signal.SIGKILL))
            harness.master.spawn_missing()
    assert harness.kills == [] and harness.recovery.requeued == []
    assert all(harness.requests_to(c) == [] for c in children)
    assert len(harness.forks) == 3
    [line] = [r.getMessage() for r in caplog.records if "not by the children" in r.getMessage()]
    assert "the children hold 90 MB, the rest 870 MB" in line and "tmpfs/shm files 700 MB" in line


def test_a_child_whose_subprocess_grows_is_measured_and_killed_with_it(
    make_harness: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hole 4: a job's subprocess (in a session of its own) grew while the
    master, measuring children alone, killed the *other* child. Its tree is
    measured, and the kill takes the subprocess too."""
    harness = make_harness(container_mb=1000)
    children = harness.start_all()
    grower = 7_000_001  # a fake pid: the descendant seam below names it
    sizes = {children[0].pid: 60.0, children[1].pid: 20.0, children[2].pid: 20.0, grower: 880.0}
    sizes_for(monkeypatch, sizes)
    descendants = harness.master.memory.descendants
    monkeypatch.setattr(
        descendants,
        "update",
        lambda roots: {pid: ([grower] if pid == children[1].pid else []) for pid in roots},
    )
    killed: list[int] = []
    monkeypatch.setattr(descendants, "kill", lambda root: killed.append(root) or [grower])
    check_memory_now(harness)  # 980 MB: the tree of child 1 holds 900 of it
    assert harness.signals_to(children[1]) == [signal.SIGKILL]
    assert harness.signals_to(children[0]) == [] and killed == [children[1].pid]
