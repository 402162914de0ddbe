"""The master: forks the children, then only supervises. It runs no job code.

An arbiter in gunicorn's manner. Its loop: wait (select on the signal
wakeup pipe, the Redis thread's pipe and the children's pipes, at most a
second) -> handle each queued signal (``handle_<name>``) -> act on remote
commands -> reap -> check memory -> SIGKILL overdue children -> restore
the child count (crash-loop backoff) -> publish its state. The loop never
talks to Redis, so no reap, fork, signal or stop deadline waits on it
(SPEC §8): every Redis duty is done by one thread, ``RedisDuties``
(duties.py), which says why forking beside it is safe. Only start-up,
before any child exists, waits on Redis.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from dataclasses import dataclass, field

from jobmaster import exitcodes, lifecycle
from jobmaster.config import Config
from jobmaster.embedded import EmbeddedRedis
from jobmaster.embedded_watch import EmbeddedWatch
from jobmaster.metrics.hub import MetricsHub
from jobmaster.pipes import MAX_JOBS, READY, STUCK
from jobmaster.proctitle import master_title, set_title
from jobmaster.signals import SignalQueue
from jobmaster.signals import name as signal_name
from jobmaster.supervisor import exits
from jobmaster.supervisor.backoff import Respawns
from jobmaster.supervisor.children import QUIET, RETIRING, RUNNING, Child, ChildTable
from jobmaster.supervisor.deaths import judge
from jobmaster.supervisor.duties import MasterState, RedisDuties
from jobmaster.supervisor.memory_policy import MemoryPolicy
from jobmaster.supervisor.sdnotify import Notifier
from jobmaster.supervisor.spawn import fork_child, warn_about_threads
from jobmaster.supervisor.stopping import Stopper

log = logging.getLogger("jobmaster.supervisor.master")

# Seconds the Redis thread gets, once the last child is gone, to requeue what
# is left and clear the heartbeat: a stop ends on time whatever Redis does.
DUTIES_GRACE = 2.0


@dataclass(eq=False, kw_only=True)
class Master:
    """Its collaborators are built outside (build.py) and handed in."""

    config: Config
    identity: str
    children: ChildTable
    stopper: Stopper  # TERM, deadlines, SIGKILL, recycles (stopping.py)
    memory: MemoryPolicy  # sizes and the container's limit (memory_policy.py)
    duties: RedisDuties  # every Redis call, on its own thread (duties.py)
    signals: SignalQueue
    notifier: Notifier  # systemd's
    metrics: MetricsHub | None = None  # /metrics, when metrics_port is set
    embedded: EmbeddedRedis | None = None
    respawns: Respawns = field(default_factory=Respawns)  # crash-loop backoff, per slot
    quiet: bool = False
    stopping: bool = False
    announced_ready: bool = False
    interrupts: int = 0  # SIGINTs: the second one stops at once
    exit_code: int = exitcodes.OK

    @property
    def wanted(self) -> int:
        return self.children.wanted

    # -- the loop ----------------------------------------------------------
    def run(self) -> int:
        lifecycle.run_master_start()  # after the app import (cli.prepared), before any fork
        warn_about_threads()  # the app's and its hooks', before any of ours start
        self.duties.wait_for_redis()  # before any fork, and before our handlers
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
        self.duties.recover_left_behind()
        self.publish()
        self.duties.start()  # after start-up's own Redis calls, before any fork
        # Restarts a dead embedded Redis on a thread of its own (embedded_watch.py).
        watch = EmbeddedWatch(self.embedded) if self.embedded is not None else None
        if watch is not None:
            watch.start()
        try:
            self.spawn_missing()
            while not (self.stopping and not self.children):
                for child in self.wait():
                    self.read_ready(child)
                self.handle_signals()
                self.take_news()
                self.reap()
                if not self.stopping:
                    self.memory.check()
                self.stopper.overdue()
                if not self.stopping:
                    self.spawn_missing()
                self.update_title()
                self.publish()
                self.duties.ensure_running()
                self.notifier.watchdog()
            self.publish()
            self.duties.finish(DUTIES_GRACE)  # what Redis did not take is logged there
            self.take_news()
            log.info("master stopped")
            return self.exit_code
        finally:
            if watch is not None:
                watch.stop()  # before prepared() stops the server: no restart then
            self.signals.restore()
            if self.metrics is not None:
                self.metrics.close()

    def wait(self) -> list[Child]:
        """Until a signal, a remote command, a child's byte, or the next deadline:
        a respawn, a memory sample, a SIGKILL on time (not up to a second late).
        Returns the children whose pipes have something to say."""
        self.respawns.prune(self.wanted, self.children.indexes())
        now, respawn = time.monotonic(), self.respawns.next_due()
        waits = [1.0]  # at most a second: the loop's other duties are periodic
        if respawn is not None and not self.stopping:
            waits.append(respawn - now)
        if self.memory.watch.active:
            waits.append(self.memory.next_check - now)
        waits += [c.stop_deadline - now for c in self.children if c.stop_deadline is not None]
        fds = [fd for fd in (self.signals.wakeup_fd,) if fd is not None]
        fds.append(self.duties.wakeup_fd)
        fds += [c.ready_fd for c in self.children if c.ready_fd is not None]
        metrics = self.metrics
        fds += metrics.read_fds() if metrics is not None else []
        writing = metrics.write_fds() if metrics is not None else []
        try:
            readable, writable, _ = select.select(fds, writing, [], max(0.0, min(waits)))
        except InterruptedError:
            readable, writable = [], []
        self.signals.drain_wakeup()
        self.duties.drain_wakeup()
        if metrics is not None:
            metrics.on_ready(readable, writable)  # never blocks: non-blocking sockets
        return [c for fd in readable if (c := self.children.by_ready_fd(fd)) is not None]

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
            self.stopper.stop_now("second SIGINT")
        else:
            self.begin_stop("SIGINT")

    def handle_sigquit(self) -> None:
        self.begin_stop("SIGQUIT")
        self.stopper.stop_now("SIGQUIT")

    def handle_sigtstp(self) -> None:
        self.set_quiet(True)

    def handle_sigcont(self) -> None:
        self.set_quiet(False)

    def handle_sigusr1(self) -> None:
        self.stopper.forward(signal.SIGUSR1)

    def handle_sighup(self) -> None:
        """Rolling restart: new children first; each old one stops once one is
        ready. Children still starting (from an earlier HUP) are already new:
        only ready ones retire, so a second HUP never strands a generation.

        A fresh start for the crash-loop backoff too: an empty slot waiting out
        up to MAX_DELAY (often the very crash the operator has just deployed a
        fix for) is forked now, and the old children, which retire only once
        ``wanted`` new ones are ready, don't wait for it."""
        if self.stopping:
            return
        self.respawns.clear()
        for child in self.children.in_state(RUNNING, QUIET):
            child.retire("replaced (HUP)", restart="hup")
        log.info("rolling restart: replacing %d children", len(self.children.in_state(RETIRING)))

    def handle_sigttin(self) -> None:
        self.children.wanted += 1
        log.info("one child more: %d wanted", self.wanted)

    def handle_sigttou(self) -> None:
        if self.wanted <= 1:
            log.info("already down to one child")
            return
        self.children.wanted -= 1
        serving = sorted(self.children.serving(), key=lambda c: c.index)
        if len(serving) > self.wanted:
            self.stopper.stop(serving[-1], "pool shrunk (TTOU)")
        self.stopper.retire_excess(self.wanted)
        log.info("one child fewer: %d wanted", self.wanted)

    def begin_stop(self, reason: str) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.notifier.send("STOPPING=1")
        log.info("%s: graceful stop (shutdown_timeout %.0fs)", reason, self.config.shutdown_timeout)
        self.stopper.stop_all(reason)

    def set_quiet(self, quiet: bool) -> None:
        if self.stopping or quiet == self.quiet:
            return
        self.quiet = quiet
        log.info("%s children", "quieting" if quiet else "resuming")
        self.stopper.steer(quiet)  # never a recycling or stopping child

    def take_news(self) -> None:
        """The requeues the Redis thread did (for the metrics), and the remote
        commands it read: each means what its signal means, but a remote stop
        exits with a code of its own (REMOTE_STOP, not 0), so the service
        manager decides whether it is final (README "Deployment")."""
        for report in self.duties.take_reports():
            if self.metrics is not None:
                self.metrics.recovered(report)
        for command in self.duties.take_commands():
            log.info("remote command: %s", command)
            if command == "stop":
                if not self.stopping:
                    self.exit_code = exitcodes.REMOTE_STOP
                self.begin_stop("remote stop")
            else:  # control.COMMANDS: quiet or resume
                self.set_quiet(command == "quiet")

    # -- children ------------------------------------------------------------
    def spawn_missing(self) -> None:
        """Restore the child count: every free slot not in backoff, nor held
        back by the memory policy until the child it replaces has gone."""
        now = time.monotonic()
        used = self.children.indexes()
        self.respawns.prune(self.wanted, used)
        free = [i for i in range(1, self.wanted + 1) if i not in used]
        missing = self.wanted - len(self.children.serving())
        for index in free[: max(0, missing)]:
            if self.respawns.waiting(index, now) or self.memory.holding(index):
                continue
            self.respawns.forked(index)
            self.spawn(index)

    def spawn(self, index: int) -> None:
        # The master's ends of its other children's pipes are not the new
        # child's to hold (nor to write to).
        others = [fd for c in self.children for fd in (c.ready_fd, c.requests_fd) if fd is not None]
        others += self.duties.fds()
        metrics = self.metrics
        others += metrics.child_fds() if metrics is not None else []
        others += [fd for fd in (self.signals.wakeup_fd,) if fd]
        sender = metrics.sender if metrics is not None else None
        forked = fork_child(self.config, index, others, metrics=sender, quiet=self.quiet)
        self.children.add(forked.child(index, time.monotonic(), quiet=self.quiet))
        log.info("child %d started (pid %d)", index, forked.pid)

    def read_ready(self, child: Child) -> None:
        """A child's pipe: ``R`` once it is up, ``M`` when it reached
        max_jobs_per_child, ``T`` when a job is stuck past its timeout; end of
        file when it exits."""
        data = child.read_pipe()
        if MAX_JOBS in data:
            limit = self.config.max_jobs_per_child
            self.stopper.recycle(child, f"reached max_jobs_per_child ({limit})", kind="max_jobs")
        if STUCK in data:
            self.stopper.recycle(child, "has a job stuck past its timeout", kind="timeout")
        if READY not in data or not child.ready(time.monotonic(), self.quiet):
            return
        # The pool's state, said again now that its handlers are in: quiet, or
        # resumed since it was forked quiet (spawn.take_signals keeps a CONT
        # sent before; this holds whatever happened to that one).
        if self.quiet:
            self.stopper.kill(child, signal.SIGTSTP)
        elif child.started_quiet:
            self.stopper.kill(child, signal.SIGCONT)
        self.stopper.retire_excess(self.wanted)
        if not self.announced_ready and self.children.ready() >= self.wanted:
            self.announced_ready = True
            self.notifier.send(f"READY=1\nSTATUS={self.children.ready()}/{self.wanted} children")
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
        child.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # subprocesses its jobs left behind
        now = time.monotonic()
        self.memory.gone(child)  # its subprocesses in a session of their own too
        death = judge(child, status, started, self.config, now)
        if self.metrics is not None:
            self.metrics.child_gone(child.pid, death.restart)
        self.duties.requeue(death.dead)  # by the Redis thread, off the loop
        if death.app_failed:
            log.error("the app failed to import in a child: halting instead of fork-looping")
            self.exit_code = exitcodes.APP_LOAD_FAILED
            self.begin_stop("app import failure")
        elif death.backoff:  # replaced: at once, or after a backoff if it died young
            served = now - child.ready_at if child.ready_at is not None else 0.0
            self.respawns.after_death(child.index, served, now)

    # -- appearance ----------------------------------------------------------
    def publish(self) -> None:
        """What the heartbeat shows, as of this pass: the Redis thread never
        reads the loop's own (changing) objects."""
        children = tuple(c.identity for c in self.children)
        memory = (self.memory.watch.container_mb or 0.0, self.memory.used_mb or 0.0)
        self.duties.publish(MasterState(self.wanted, self.quiet, self.stopping, children, *memory))

    def update_title(self) -> None:
        state = "stopping" if self.stopping else "quiet" if self.quiet else ""
        set_title(master_title(self.children.ready(), self.wanted, self.config.queue_names, state))
