"""The master: forks the children, then only supervises. It runs no job code.

Its loop is short: wait (select on the signal wakeup pipe, the Redis
thread's pipe and the children's ready pipes, at most a second) -> handle
each signal -> act on remote commands -> reap -> check memory -> stop
overdue children -> restore the child count -> publish its state. The loop
never talks to Redis, so no reap, fork, signal or stop deadline waits on
it (SPEC §8): every Redis duty (dead children's requeues, the control list
and heartbeat, periodic jobs, history, the queue sizes of /metrics) is
done by one thread, ``RedisDuties`` (duties.py), which says why forking
beside it is safe. Only start-up, before any child exists, waits on Redis.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time

import redis

from jobmaster import exitcodes
from jobmaster.cgroups import find_memory_cgroup
from jobmaster.config import Config
from jobmaster.connection import connect, wait_for_redis
from jobmaster.deadset import DeadSetLimits
from jobmaster.embedded import EmbeddedRedis
from jobmaster.identity import Identity
from jobmaster.keys import Keys
from jobmaster.metrics.hub import MetricsHub
from jobmaster.periodic import PeriodicTicker
from jobmaster.pipes import MAX_JOBS, PUSH_BACK, READY, RECYCLE, STUCK, send_request
from jobmaster.poison import crash_triage
from jobmaster.proctitle import master_title, set_title
from jobmaster.recovery import Recovery
from jobmaster.redis_target import RedisTarget
from jobmaster.scripts import Scripts
from jobmaster.signals import MASTER_SIGNALS, SignalQueue
from jobmaster.signals import name as signal_name
from jobmaster.supervisor import exits
from jobmaster.supervisor.backoff import CrashBackoff
from jobmaster.supervisor.children import (
    QUIET,
    RETIRING,
    RUNNING,
    STARTING,
    STOPPING,
    Child,
    ChildTable,
)
from jobmaster.supervisor.duties import DeadChild, MasterState, RedisDuties
from jobmaster.supervisor.history import HistoryRecorder
from jobmaster.supervisor.memory import (
    AUTO_FILL,
    GUARD,
    LAST_LINE,
    MB,
    POLL,
    WATCH,
    MemoryWatch,
    Reading,
    auto_limit_mb,
    measure_mb,
    pace,
)
from jobmaster.supervisor.sdnotify import Notifier
from jobmaster.supervisor.spawn import fork_child, warn_about_threads

log = logging.getLogger("jobmaster.supervisor.master")

STOP_MARGIN = 5.0  # seconds a stopping child gets beyond shutdown_timeout to push back
# Seconds the Redis thread gets, once the last child is gone, to requeue what
# is left and clear the heartbeat: a stop ends on time whatever Redis does.
DUTIES_GRACE = 2.0


class Master:
    def __init__(self, config: Config, embedded: EmbeddedRedis | None = None) -> None:
        self.config = config
        self.embedded = embedded
        self.redis = connect(RedisTarget.of(config), retry_commands=False)
        self.keys = Keys(config.namespace)
        limits = DeadSetLimits(config.dead_max_jobs, config.dead_max_days)
        status_ttl = round(config.status_ttl) if config.track_status else 0
        # Its start-up scan (recover_left_behind) is fenced like the children's
        # (recovery.py): a heartbeat deleted as this master starts is not believed.
        grace = config.heartbeat_ttl / 2
        scripts = Scripts(self.redis)
        self.recovery = Recovery(self.redis, self.keys, scripts, limits, status_ttl, grace)
        self.ticker = PeriodicTicker(
            self.redis, self.keys, config.periodic.values(), status_ttl=status_ttl
        )
        self.history = HistoryRecorder(self.redis, self.keys)  # the dashboard's chart
        self.identity = str(Identity())
        self.children = ChildTable()
        self.wanted = config.processes
        self.backoff: dict[int, CrashBackoff] = {}
        self.respawn_at: dict[int, float] = {}
        self.signals = SignalQueue(MASTER_SIGNALS, wakeup=True)
        self.notifier = Notifier()
        self.quiet = False
        self.stopping = False
        self.interrupts = 0
        self.exit_code = exitcodes.OK
        self.announced_ready = False
        self.memory = self.memory_policy()
        self.sizes: dict[int, float] = {}  # pid -> MB, from the last memory check
        self._next_memory_check = 0.0
        self.metrics: MetricsHub | None = None  # /metrics, when metrics_port is set
        if config.metrics_port:
            self.metrics = MetricsHub(config, self.children, lambda: self.wanted, self.redis)
        self.duties = RedisDuties(
            config=config,
            client=self.redis,
            keys=self.keys,
            identity=self.identity,
            recovery=self.recovery,
            ticker=self.ticker,
            history=self.history,
            queue_watch=self.metrics.queue_watch if self.metrics is not None else None,
            max_child_mb=self.memory.limit_mb,
        )

    def memory_policy(self) -> MemoryWatch:
        """The per-child limit (a number, or "auto" from the container), and the
        container's limit: our own cgroup's, where the kernel applies it (cgroups.py)."""
        config = self.config
        self.cgroup = find_memory_cgroup(config.cgroup_root)
        self.memory_used_mb: float | None = None  # the cgroup's, at the last sample
        self.oom_kills: int | None = None  # the kernel's count in our cgroup, last seen
        self.memory_holds: dict[int, int] = {}  # slot -> the pid its replacement waits for
        self._last_memory_check = self._next_memory_poll = 0.0  # monotonic
        container = self.cgroup.limit if self.cgroup is not None else None
        where = self.cgroup.describe() if self.cgroup is not None else "no memory cgroup"
        limit: float = 0.0
        if config.max_child_mb == "auto":
            if container is None:
                log.warning("max_child_mb = auto, but no container memory limit (%s): off", where)
            else:
                base, what = self.memory_base()
                limit = auto_limit_mb(container, base, config.processes)
                log.info(
                    "max_child_mb auto: %d MB per child (%d children sharing %.0f%% of the "
                    "container's %.0f MB, less %.0f MB of %s)",
                    limit,
                    config.processes,
                    AUTO_FILL * 100,
                    container / MB,
                    base / MB,
                    what,
                )
        else:
            limit = float(config.max_child_mb)
        if container is not None:
            log.info(
                "container memory limit %s: sampling faster from %.0f%%, recycling the largest "
                "child at %.0f%%, killing it at %.0f%%",
                where,
                WATCH * 100,
                GUARD * 100,
                LAST_LINE * 100,
            )
        container_mb = container / MB if container is not None else None
        interval = config.memory_check_interval
        return MemoryWatch(limit_mb=limit, container_mb=container_mb, interval=interval)

    def memory_base(self) -> tuple[int, str]:
        """What the container holds before any child: the group's usage (the
        master, and anything else in it: an embedded Redis, a sidecar), else the
        master's own RSS; in bytes, with what it is."""
        usage = self.cgroup.read() if self.cgroup is not None else None
        if usage is not None:
            return usage.working_set, "the group's usage before forking"
        return int((measure_mb(os.getpid(), "rss") or 0) * MB), "the master's RSS"

    # -- the loop ----------------------------------------------------------
    def run(self) -> int:
        warn_about_threads()  # the app's, before any of ours start
        wait_for_redis(self.redis, self.config.redis_url_masked)  # before any fork
        if self.metrics is not None:
            self.metrics.start()  # a port in use fails here, before any fork
        self.signals.install()
        log.info(
            "master %s starting %d children x %d threads on %s",
            self.identity,
            self.wanted,
            self.config.concurrency,
            ",".join(self.config.queues),
        )
        self.recover_left_behind()
        self.publish()
        self.duties.start()  # after start-up's own Redis calls, before any fork
        try:
            self.spawn_missing()
            while not (self.stopping and not self.children):
                self.wait()
                self.handle_signals()
                self.take_news()
                self.reap()
                if self.embedded is not None:
                    self.embedded.ensure_running()
                if not self.stopping:
                    self.check_memory()
                self.stop_overdue()
                if not self.stopping:
                    self.spawn_missing()
                self.update_title()
                self.publish()
                self.duties.ensure_running()
                self.notifier.watchdog()
            self.finish_duties()
            log.info("master stopped")
            return self.exit_code
        finally:
            self.signals.restore()
            if self.metrics is not None:
                self.metrics.close()

    def wait(self) -> None:
        self.prune_respawns()
        now = time.monotonic()
        # At most a second: the loop's other duties are periodic. A remote
        # command wakes it at once, through the Redis thread's pipe.
        waits = [1.0]
        if self.respawn_at and not self.stopping:
            waits.append(min(self.respawn_at.values()) - now)
        if self.memory.limit_mb or self.memory.container_mb:
            waits.append(self._next_memory_check - now)
        deadlines = [c.stop_deadline for c in self.children if c.stop_deadline is not None]
        if deadlines:  # a SIGKILL on time, not up to a second late
            waits.append(min(deadlines) - now)
        timeout = max(0.0, min(waits))
        fds = [fd for fd in (self.signals.wakeup_fd,) if fd is not None]
        fds.append(self.duties.wakeup_fd)
        fds += [c.ready_fd for c in self.children if c.ready_fd is not None]
        metrics = self.metrics
        fds += metrics.read_fds() if metrics is not None else []
        writing = metrics.write_fds() if metrics is not None else []
        try:
            readable, writable, _ = select.select(fds, writing, [], timeout)
        except InterruptedError:
            readable, writable = [], []
        self.signals.drain_wakeup()
        self.duties.drain_wakeup()
        for fd in readable:
            child = self.children.by_ready_fd(fd)
            if child is not None:
                self.read_ready(child)
        if metrics is not None:
            metrics.on_ready(readable, writable)  # never blocks: non-blocking sockets

    # -- signals -------------------------------------------------------------
    def handle_signals(self) -> None:
        while (signum := self.signals.get(timeout=0)) is not None:
            if signum == signal.SIGCHLD:
                continue  # the reap that follows every wait handles it
            log.info("received %s", signal_name(signum))
            handler = getattr(self, f"handle_{signal_name(signum).lower()}", None)
            if handler is not None:
                handler()

    def handle_sigterm(self) -> None:
        self.begin_stop("SIGTERM")  # more TERMs never shorten it

    def handle_sigint(self) -> None:
        self.interrupts += 1
        if self.interrupts >= 2 and self.stopping:
            self.stop_now("second SIGINT")
        else:
            self.begin_stop("SIGINT")

    def handle_sigquit(self) -> None:
        self.begin_stop("SIGQUIT")
        self.stop_now("SIGQUIT")

    def handle_sigtstp(self) -> None:
        self.set_quiet(True)

    def handle_sigcont(self) -> None:
        self.set_quiet(False)

    def handle_sighup(self) -> None:
        """Rolling restart: new children first; each old one stops once one is ready.

        Children still starting (from an earlier HUP) are already new: only
        ready ones retire, so a second HUP never strands a generation.

        It is also a fresh start for the crash-loop backoff: an empty slot
        waiting out up to MAX_DELAY (often the very crash the operator has
        just deployed a fix for) is forked now, and the old children, which
        retire only once ``wanted`` new ones are ready, don't wait for it.
        A new child that crashes again backs off from the first delay.
        """
        if self.stopping:
            return
        self.respawn_at.clear()
        self.backoff.clear()
        for child in self.children.in_state(RUNNING, QUIET):
            child.state = RETIRING
            child.stop_reason = "replaced (HUP)"
            child.restart_reason = "hup"
        log.info("rolling restart: replacing %d children", len(self.children.in_state(RETIRING)))

    def handle_sigttin(self) -> None:
        self.wanted += 1
        log.info("one child more: %d wanted", self.wanted)

    def handle_sigttou(self) -> None:
        if self.wanted <= 1:
            log.info("already down to one child")
            return
        self.wanted -= 1
        serving = sorted(self.children.serving(), key=lambda c: c.index)
        if len(serving) > self.wanted:
            self.stop_child(serving[-1], "pool shrunk (TTOU)")
        self.retire_excess()
        log.info("one child fewer: %d wanted", self.wanted)

    def retire_excess(self) -> None:
        """Stop retiring children while ready ones plus retiring ones exceed ``wanted``.

        One rule for HUP, repeated HUPs and TTOU during a rolling restart:
        capacity never drops below ``wanted`` and no old child is left behind.
        """
        retiring = sorted(self.children.in_state(RETIRING), key=lambda c: c.index)
        ready = len(self.children.in_state(RUNNING, QUIET))
        excess = ready + len(retiring) - self.wanted
        for child in retiring[: max(0, excess)]:
            self.stop_child(child, child.stop_reason)

    def recycle(
        self, child: Child, reason: str, memory_cause: str | None = None, kind: str = "memory"
    ) -> None:
        """Replace a child gracefully: its replacement is forked in this same
        loop pass (it no longer counts as serving), and it stops fetching now.

        Over memory (``memory_cause``) it gets a recycle request on its pipe
        (pipes.py: never a signal, which anyone may send to every process),
        saying which limit: it finishes its jobs within memory_grace, then
        stops; jobs it must push back then count a crash (only those it was
        running: poison.py), so a job that bloats every time ends in the dead
        set. With the container near its limit, the replacement waits until
        the child has gone (``hold_replacement``). A child at
        max_jobs_per_child has quieted itself already and stops the same
        way, without blame. ``kind`` labels the restart in the metrics.
        """
        if child.state not in (STARTING, RUNNING, QUIET):
            return
        child.restart_reason = kind
        held = memory_cause is not None and self.hold_replacement(child)
        log.warning(
            "child %d (pid %d) %s: recycling it (%s)",
            child.index,
            child.pid,
            reason,
            f"replacement once it has gone: the container uses {self.memory_usage()}"
            if held
            else "replacement first",
        )
        child.memory_cause = memory_cause
        if memory_cause is not None:
            if send_request(child.requests_fd, RECYCLE, memory_cause):
                self.expect_stop(child, reason, self.config.memory_grace)
            else:  # its pipe is gone or full: a plain graceful stop
                self.stop_child(child, reason)
        else:
            # It stops by itself once idle (or after memory_grace); TERM only
            # if it outlives that.
            child.state = STOPPING
            child.stop_reason = reason
            child.stop_deadline = time.monotonic() + self.config.memory_grace
            child.stop_deadline += self.config.shutdown_timeout + STOP_MARGIN

    def hold_replacement(self, child: Child) -> bool:
        """Replacement first only where there is room for both: with the container
        over WATCH, a child recycled over memory is replaced once it has gone.

        Why: a fresh child costs some tens of MB the moment it forks and starts
        its jobs, while the old one still holds all of its memory until its
        jobs end. Three children of a 600 MB container recycled at once near
        80 % took it to 97 % within 200 ms. Capacity dips by one child for as
        long as the old one takes to finish its jobs (at most memory_grace).
        """
        used, limit = self.memory_used_mb, self.memory.container_mb
        if used is None or not limit or used < WATCH * limit:
            return False
        self.memory_holds[child.index] = child.pid
        bound = self.config.memory_grace + self.config.shutdown_timeout + 2 * STOP_MARGIN
        self.respawn_at[child.index] = time.monotonic() + bound  # never held for ever
        return True

    def release_holds(self) -> None:
        """Fork the replacements held back for children now gone (or with room again)."""
        limit = self.memory.container_mb or 0.0
        room = self.memory_used_mb is not None and self.memory_used_mb < WATCH * limit
        for index, pid in list(self.memory_holds.items()):
            if pid not in self.children.by_pid or room:
                del self.memory_holds[index]
                self.respawn_at.pop(index, None)

    def check_memory(self) -> None:
        """Sample the children and the cgroup; recycle, push back or kill as the
        watch decides (memory.py). psutil and file reads only: no Redis here."""
        self.release_holds()  # every pass: a replacement waits no longer than its reap
        now = time.monotonic()
        watch = self.memory
        if not watch.active or (now < self._next_memory_check and not self.memory_pressing(now)):
            return
        reading = self.read_memory()
        actions = watch.decide(reading, set(self.children.by_pid))
        self._last_memory_check = time.monotonic()
        self._next_memory_check = self._last_memory_check + actions.interval
        self.memory_used_mb = actions.used_mb
        metric, limit = self.config.memory_metric, f"{watch.limit_mb:.0f}"
        if actions.kill is not None:
            self.memory_kill(self.children.by_pid[actions.kill[0]], actions.kill[1])
        for pid in actions.push_back:
            self.push_back_now(self.children.by_pid[pid])
        for pid, size, why in actions.recycle:
            child = self.children.by_pid[pid]
            if why == "guard":
                self.recycle(
                    child,
                    f"is the largest ({size:.0f} MB {metric}) while the container uses "
                    f"{self.memory_usage()} (container guard at {GUARD:.0%})",
                    memory_cause=f"container memory guard ({watch.container_mb:.0f} MB)",
                )
            else:
                far = f", {size / watch.limit_mb:.2f}x: at once" if why == "far" else ""
                self.recycle(
                    child,
                    f"uses {size:.0f} MB ({metric}), over max_child_mb {limit}{far}",
                    memory_cause=f"over max_child_mb {limit} ({metric})",
                )

    def memory_pressing(self, now: float) -> bool:
        """Between samples: whether the cgroup's usage alone (one file read, at most
        every POLL) says the next sample is due already (memory.py's pace)."""
        limit = self.memory.container_mb
        if self.cgroup is None or not limit or now < self._next_memory_poll:
            return False
        self._next_memory_poll = now + POLL
        usage = self.cgroup.read()
        if usage is None:
            return False
        interval = pace(usage.working_set / MB / limit, self.config.memory_check_interval)
        return now >= self._last_memory_check + interval

    def read_memory(self) -> Reading:
        """Every child's size (leaving ones included) and the cgroup's usage."""
        metric = self.config.memory_metric
        sizes = {}
        for child in self.children:
            size = measure_mb(child.pid, metric)
            if size is not None:
                sizes[child.pid] = size
                log.debug("child %d (pid %d): %.0f MB %s", child.index, child.pid, size, metric)
        self.sizes = sizes
        leaving = self.children.in_state(RETIRING, STOPPING)
        usage = self.cgroup.read() if self.cgroup is not None else None
        if usage is not None and usage.oom_kills is not None:
            if self.oom_kills is not None and usage.oom_kills > self.oom_kills:
                log.error(
                    "the kernel OOM-killed %d process(es) in our cgroup (%s)",
                    usage.oom_kills - self.oom_kills,
                    self.memory_usage(),
                )
            self.oom_kills = usage.oom_kills
        return Reading(
            sizes,
            leaving=frozenset(c.pid for c in leaving),
            starting=frozenset(c.pid for c in self.children.in_state(STARTING)),
            recycled=frozenset(c.pid for c in leaving if c.memory_cause is not None),
            used_mb=usage.working_set / MB if usage is not None else None,
            master_mb=(measure_mb(os.getpid(), "rss") or 0.0) if usage is None else 0.0,
        )

    def memory_usage(self) -> str:
        used, limit = self.memory_used_mb, self.memory.container_mb
        if used is None or not limit:
            return "an unknown share of its limit"
        return f"{used:.0f} MB of {limit:.0f} MB ({used / limit:.0%})"

    def memory_kill(self, child: Child, size: float) -> None:
        """The last line: SIGKILL the largest child now; its jobs are requeued
        when it is reaped, blamed as exactly as for a crash (poison.py)."""
        limit = self.memory.container_mb or 0.0
        log.warning(
            "memory kill: child %d (pid %d), the largest (%.0f MB %s), SIGKILLed: the container "
            "uses %s, past the last line at %.0f%%; its jobs are requeued",
            child.index,
            child.pid,
            size,
            self.config.memory_metric,
            self.memory_usage(),
            LAST_LINE * 100,
        )
        child.memory_cause = f"container memory at {self.memory_used_mb or 0:.0f} of {limit:.0f} MB"
        child.memory_event = "was killed over the container's memory limit"
        child.restart_reason = "memory"
        self.expect_stop(child, "memory kill")  # its exit is no crash: the cause says why
        self.kill(child, signal.SIGKILL)

    def push_back_now(self, child: Child) -> None:
        """No room for a recycled child to finish its jobs: it pushes them back now."""
        if not send_request(child.requests_fd, PUSH_BACK, self.memory_usage()):
            return  # its pipe is gone: it is leaving anyway, and the last line holds
        log.warning(
            "child %d (pid %d): no room to finish its jobs (the container uses %s): "
            "pushing them back now",
            child.index,
            child.pid,
            self.memory_usage(),
        )
        deadline = time.monotonic() + STOP_MARGIN
        child.stop_deadline = min(child.stop_deadline or deadline, deadline)

    def handle_sigusr1(self) -> None:
        self.forward(signal.SIGUSR1)

    # -- lifecycle -----------------------------------------------------------
    def begin_stop(self, reason: str) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.notifier.send("STOPPING=1")
        log.info("%s: graceful stop (shutdown_timeout %.0fs)", reason, self.config.shutdown_timeout)
        for child in self.children:
            self.stop_child(child, reason)

    def stop_remotely(self) -> None:
        """``jobmaster ctl stop``: a graceful stop whose exit code says so
        (REMOTE_STOP, not 0), so the service manager decides whether it is final
        (the shipped systemd unit restarts: a forged stop costs a restart, not
        an outage; README "Deployment")."""
        if not self.stopping:
            self.exit_code = exitcodes.REMOTE_STOP
        self.begin_stop("remote stop")

    def stop_now(self, reason: str) -> None:
        log.warning("%s: stopping children at once (running jobs are pushed back)", reason)
        deadline = time.monotonic() + STOP_MARGIN
        for child in self.children:
            child.stop_deadline = min(child.stop_deadline or deadline, deadline)
            self.kill(child, signal.SIGQUIT)

    def stop_child(self, child: Child, reason: str) -> None:
        """Ask a child to go (TERM); SIGKILL once ``shutdown_timeout`` and a margin
        have passed."""
        if child.state == STOPPING:
            return
        self.expect_stop(child, reason)
        self.kill(child, signal.SIGTERM)

    def expect_stop(self, child: Child, reason: str, grace: float = 0.0) -> None:
        """The child is on its way out: its exit is no crash, and it gets SIGKILL
        once ``grace + shutdown_timeout`` and a margin have passed."""
        child.state = STOPPING
        child.stop_reason = reason
        timeout = grace + self.config.shutdown_timeout + STOP_MARGIN
        child.stop_deadline = time.monotonic() + timeout

    def stop_overdue(self) -> None:
        now = time.monotonic()
        for child in self.children.in_state(STOPPING):
            if child.stop_deadline is not None and now > child.stop_deadline:
                log.warning(
                    "child %d (pid %d) did not stop in time: SIGKILL", child.index, child.pid
                )
                child.stop_deadline = None
                self.kill(child, signal.SIGKILL)

    def set_quiet(self, quiet: bool) -> None:
        if self.stopping or quiet == self.quiet:
            return
        self.quiet = quiet
        log.info("%s children", "quieting" if quiet else "resuming")
        self.forward(signal.SIGTSTP if quiet else signal.SIGCONT)
        for child in self.children.in_state(RUNNING, QUIET):
            child.state = QUIET if quiet else RUNNING

    def forward(self, signum: int) -> None:
        for child in self.children:
            self.kill(child, signum)

    def kill(self, child: Child, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # already dead: the reaper sees it
            os.kill(child.pid, signum)

    # -- children ------------------------------------------------------------
    def prune_respawns(self) -> None:
        """Forget backoff slots no longer wanted (TTOU) or already filled: they
        would never be spawned, and their past time would make ``wait`` spin."""
        used = self.children.indexes()
        for index in list(self.respawn_at):
            if index > self.wanted or index in used:
                del self.respawn_at[index]

    def spawn_missing(self) -> None:
        now = time.monotonic()
        self.prune_respawns()
        used = self.children.indexes()
        free = [i for i in range(1, self.wanted + 1) if i not in used]
        missing = self.wanted - len(self.children.serving())
        for index in free[: max(0, missing)]:
            if self.respawn_at.get(index, 0.0) > now:
                continue
            self.respawn_at.pop(index, None)
            self.spawn(index)

    def spawn(self, index: int) -> None:
        # The master's ends of its other children's pipes are not the new
        # child's to hold (nor to write to).
        others = [fd for c in self.children for fd in (c.ready_fd, c.requests_fd) if fd is not None]
        others += self.duties.fds()
        wakeup = self.signals.wakeup_fd
        metrics = self.metrics
        if metrics is not None:
            others += metrics.child_fds()
        forked = fork_child(
            self.config,
            index,
            [*others, *([wakeup] if wakeup else [])],
            metrics=metrics.sender if metrics is not None else None,
            quiet=self.quiet,
        )
        child = Child(
            index,
            forked.pid,
            forked.identity,
            time.monotonic(),
            forked.ready_fd,
            forked.requests_fd,
            forked.slots,
        )
        self.children.add(child)
        log.info("child %d started (pid %d)", index, forked.pid)

    def read_ready(self, child: Child) -> None:
        """A child's pipe: ``R`` once it is up, ``M`` when it reached
        max_jobs_per_child, ``T`` when a job is stuck past its timeout; end of
        file when it exits."""
        try:
            data = os.read(child.ready_fd, 64) if child.ready_fd is not None else b""
        except BlockingIOError:
            return
        if not data and child.ready_fd is not None:
            os.close(child.ready_fd)
            child.ready_fd = None
        if MAX_JOBS in data:
            limit = self.config.max_jobs_per_child
            self.recycle(child, f"reached max_jobs_per_child ({limit})", kind="max_jobs")
        if STUCK in data:
            self.recycle(child, "has a job stuck past its timeout", kind="timeout")
        if READY not in data or child.state != STARTING:
            return
        child.ready_at = time.monotonic()
        child.state = QUIET if self.quiet else RUNNING
        if self.quiet:
            self.kill(child, signal.SIGTSTP)
        self.retire_excess()
        if not self.announced_ready and len(self.children.in_state(RUNNING, QUIET)) >= self.wanted:
            self.announced_ready = True
            self.notifier.send(f"READY=1\nSTATUS={self.status()}")
            log.info("all %d children up", self.wanted)

    def reap(self) -> None:
        """Collect every exited child, ours or not (the master may be PID 1)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid)
            if child is not None:
                self.child_exited(child, status)
            elif self.embedded is not None and pid == self.embedded.pid:
                log.error("embedded redis-server (pid %d) died: %s", pid, exits.describe(status))
            else:
                log.debug("reaped process %d: %s", pid, exits.describe(status))

    def child_exited(self, child: Child, status: int) -> None:
        # Which of its jobs were running as it died (the rest it had only
        # fetched): read now that nothing writes to its slots any more.
        started = child.slots.started() if child.slots is not None else None
        self.close_pipes(child)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # subprocesses its jobs left behind
        served = time.monotonic() - child.ready_at if child.ready_at is not None else 0.0
        unexpected = not child.expected_exit
        # A child that left on its own with exit 0 (a remote stop of that one
        # child) pushed its jobs back itself: replaced, but not a crash.
        crashed = unexpected and exits.exit_code(status) != exitcodes.OK
        cause = exits.cause(status)
        if self.metrics is not None:
            restart = "crash" if crashed else "exit" if unexpected else child.restart_reason
            self.metrics.child_gone(child.pid, restart or None)
        config = self.config
        triage = None
        if crashed:
            triage = crash_triage(config.max_crashes, config.crash_queue, cause, "died", started)
        elif child.memory_cause is not None and os.WIFSIGNALED(status):
            # Killed by us after its grace: what it still ran bloated it.
            memory, event = child.memory_cause, child.memory_event
            triage = crash_triage(config.max_crashes, config.crash_queue, memory, event, started)
        where, how = f"child {child.index} (pid {child.pid})", exits.describe(status)
        # Its list is requeued by the Redis thread, which logs the count.
        self.duties.requeue(DeadChild(child.identity, where, triage, crashed, time.monotonic()))
        if crashed:
            log.error("%s died: %s; requeueing its jobs", where, how)
            if exits.exit_code(status) == exitcodes.APP_LOAD_FAILED:
                log.error("the app failed to import in a child: halting instead of fork-looping")
                self.exit_code = exitcodes.APP_LOAD_FAILED
                self.begin_stop("app import failure")
                return
        elif unexpected:
            log.warning("%s exited on its own (%s); replacing it", where, how)
        else:
            log.info("%s stopped (%s): %s", where, child.stop_reason, how)
        if unexpected:
            delay = self.backoff.setdefault(child.index, CrashBackoff()).delay_after_death(served)
            if delay:
                self.respawn_at[child.index] = time.monotonic() + delay
                log.warning(
                    "child %d ended %.1fs after it was ready: restarting in %.1fs",
                    child.index,
                    served,
                    delay,
                )

    @staticmethod
    def close_pipes(child: Child) -> None:
        for fd in (child.ready_fd, child.requests_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        child.ready_fd = child.requests_fd = None
        if child.slots is not None:
            child.slots.close()
            child.slots = None

    def recover_left_behind(self) -> None:
        """At start: requeue the lists of workers gone from this machine.

        A master that was killed (or crashed) in the moment after one of its
        children died never requeued that child's list; the child's
        heartbeat still looks alive for up to heartbeat_ttl. Its process is
        provably gone (liveness.py), so the restarted master requeues the
        list before it forks, as the dead master would have done. Other
        hosts' workers are left to their heartbeats.
        """
        try:
            self.recovery.recover_orphans(self.identity)
        except redis.RedisError as error:  # the children's own scans will do it
            log.warning("could not look for jobs left by dead workers: %s", error)

    # -- the Redis thread ---------------------------------------------------------
    def publish(self) -> None:
        """What the heartbeat shows, as of this pass: the Redis thread never
        reads the loop's own (changing) objects."""
        children = tuple(c.identity for c in self.children)
        memory = (self.memory.container_mb or 0.0, self.memory_used_mb or 0.0)
        self.duties.publish(MasterState(self.wanted, self.quiet, self.stopping, children, *memory))

    def take_news(self) -> None:
        """Remote commands the Redis thread read, and the requeues it did."""
        for report in self.duties.take_reports():
            if self.metrics is not None:
                self.metrics.recovered(report)
        for command in self.duties.take_commands():
            log.info("remote command: %s", command)
            if command == "quiet":
                self.set_quiet(True)
            elif command == "resume":
                self.set_quiet(False)
            elif command == "stop":
                self.stop_remotely()

    def finish_duties(self) -> None:
        """Every child is gone: the Redis thread gets DUTIES_GRACE to requeue
        what is left and clear the heartbeat, then the master exits regardless."""
        self.publish()
        left = self.duties.finish(DUTIES_GRACE)
        self.take_news()
        if left:
            log.warning(
                "Redis did not answer within %.0fs: the jobs of %s stay in their "
                "in-progress lists, recovered as after a crash (the next master's "
                "start-up scan, or a worker's orphan scan)",
                DUTIES_GRACE,
                ", ".join(dead.name for dead in left),
            )

    # -- appearance ----------------------------------------------------------
    def status(self) -> str:
        alive = len(self.children.in_state(RUNNING, QUIET))
        return f"{alive}/{self.wanted} children"

    def update_title(self) -> None:
        state = "stopping" if self.stopping else "quiet" if self.quiet else ""
        alive = len(self.children.in_state(RUNNING, QUIET))
        set_title(master_title(alive, self.wanted, self.config.queue_names, state))
