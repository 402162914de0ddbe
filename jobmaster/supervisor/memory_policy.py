"""The master's memory policy: measures, then acts on what memory.py decides.

Built before the master (``MemoryPolicy.build``: the per-child limit, a
number or "auto" from the container, and the container's limit: our own
cgroup's, where the kernel applies it, cgroups.py). The loop calls it
through two verbs: ``check`` each pass (sample when due, then recycle, push
back or kill), ``holding`` when it restores the child count (a replacement
held back until the recycled child has gone). psutil and file reads only:
no Redis here (SPEC §8, §9).
"""

from __future__ import annotations

import logging
import os
import signal
import time

from jobmaster.cgroups import MemoryCgroup, find_memory_cgroup
from jobmaster.config import Config
from jobmaster.pipes import RECYCLE, send_request
from jobmaster.supervisor.children import RETIRING, STARTING, STOPPING, Child, ChildTable
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
from jobmaster.supervisor.stopping import STOP_MARGIN, Stopper

log = logging.getLogger("jobmaster.supervisor.memory_policy")


class MemoryPolicy:
    def __init__(
        self,
        config: Config,
        watch: MemoryWatch,
        cgroup: MemoryCgroup | None,
        children: ChildTable,
        stopper: Stopper,
    ) -> None:
        self.config = config
        self.watch = watch
        self.cgroup = cgroup
        self.children = children
        self.stopper = stopper
        self.used_mb: float | None = None  # the cgroup's, at the last sample
        self.oom_kills: int | None = None  # the kernel's count in our cgroup, last seen
        # slot -> (the pid its replacement waits for, the latest it waits: never for ever)
        self.holds: dict[int, tuple[int, float]] = {}
        self.last_check = self.next_check = self.next_poll = 0.0  # monotonic

    @classmethod
    def build(cls, config: Config, children: ChildTable, stopper: Stopper) -> MemoryPolicy:
        cgroup = find_memory_cgroup(config.cgroup_root)
        container = cgroup.limit if cgroup is not None else None
        where = cgroup.describe() if cgroup is not None else "no memory cgroup"
        limit: float = 0.0
        if config.max_child_mb == "auto":
            if container is None:
                log.warning("max_child_mb = auto, but no container memory limit (%s): off", where)
            else:
                base, what = memory_base(cgroup)
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
        watch = MemoryWatch(limit, container_mb, config.memory_check_interval)
        return cls(config, watch, cgroup, children, stopper)

    # -- the loop's verbs ------------------------------------------------------
    def holding(self, index: int) -> bool:
        """Whether slot ``index``'s replacement waits for its recycled child to go."""
        return index in self.holds

    def check(self) -> None:
        """Sample the children and the cgroup when due; recycle, push back or kill
        as the watch decides (memory.py)."""
        self.release_holds()  # every pass: a replacement waits no longer than its reap
        now = time.monotonic()
        watch = self.watch
        if not watch.active or (now < self.next_check and not self.pressing(now)):
            return
        actions = watch.decide(self.read(), set(self.children.by_pid))
        self.last_check = time.monotonic()
        self.next_check = self.last_check + actions.interval
        self.used_mb = actions.used_mb
        metric, limit = self.config.memory_metric, f"{watch.limit_mb:.0f}"
        if actions.kill is not None:
            self.kill(self.children.by_pid[actions.kill[0]], actions.kill[1])
        for pid in actions.push_back:
            self.push_back(self.children.by_pid[pid])
        for pid, size, why in actions.recycle:
            child = self.children.by_pid[pid]
            if why == "guard":
                self.recycle(
                    child,
                    f"is the largest ({size:.0f} MB {metric}) while the container uses "
                    f"{self.usage()} (container guard at {GUARD:.0%})",
                    f"container memory guard ({watch.container_mb:.0f} MB)",
                )
            else:
                far = f", {size / watch.limit_mb:.2f}x: at once" if why == "far" else ""
                self.recycle(
                    child,
                    f"uses {size:.0f} MB ({metric}), over max_child_mb {limit}{far}",
                    f"over max_child_mb {limit} ({metric})",
                )

    # -- sampling --------------------------------------------------------------
    def pressing(self, now: float) -> bool:
        """Between samples: whether the cgroup's usage alone (one file read, at most
        every POLL) says the next sample is due already (memory.py's pace)."""
        limit = self.watch.container_mb
        if self.cgroup is None or not limit or now < self.next_poll:
            return False
        self.next_poll = now + POLL
        usage = self.cgroup.read()
        if usage is None:
            return False
        interval = pace(usage.working_set / MB / limit, self.config.memory_check_interval)
        return now >= self.last_check + interval

    def read(self) -> Reading:
        """Every child's size (leaving ones included) and the cgroup's usage."""
        metric = self.config.memory_metric
        sizes = {}
        for child in self.children:
            size = measure_mb(child.pid, metric)
            if size is not None:
                sizes[child.pid] = size
                log.debug("child %d (pid %d): %.0f MB %s", child.index, child.pid, size, metric)
        leaving = self.children.in_state(RETIRING, STOPPING)
        usage = self.cgroup.read() if self.cgroup is not None else None
        if usage is not None and usage.oom_kills is not None:
            if self.oom_kills is not None and usage.oom_kills > self.oom_kills:
                log.error(
                    "the kernel OOM-killed %d process(es) in our cgroup (%s)",
                    usage.oom_kills - self.oom_kills,
                    self.usage(),
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

    def usage(self) -> str:
        """The container's usage, for a log line."""
        used, limit = self.used_mb, self.watch.container_mb
        if used is None or not limit:
            return "an unknown share of its limit"
        return f"{used:.0f} MB of {limit:.0f} MB ({used / limit:.0%})"

    # -- acting ----------------------------------------------------------------
    def recycle(self, child: Child, reason: str, cause: str) -> None:
        """Replace a child over memory gracefully: it gets a recycle request on its
        pipe (pipes.py: never a signal, which anyone may send to every process),
        saying which limit (``cause``): it finishes its jobs within memory_grace,
        then stops; jobs it must push back then count a crash (only those it was
        running: poison.py), so a job that bloats every time ends in the dead
        set. Its replacement is forked in this loop pass, unless the container
        is near its limit (``hold``)."""
        if not child.serving:
            return
        child.restart_reason = "memory"
        held = self.hold(child)
        log.warning(
            "child %d (pid %d) %s: recycling it (%s)",
            child.index,
            child.pid,
            reason,
            f"replacement once it has gone: the container uses {self.usage()}"
            if held
            else "replacement first",
        )
        child.memory_cause = cause
        if send_request(child.requests_fd, RECYCLE, cause):
            self.stopper.expect(child, reason, self.config.memory_grace)
        else:  # its pipe is gone or full: a plain graceful stop
            self.stopper.stop(child, reason)

    def hold(self, child: Child) -> bool:
        """Replacement first only where there is room for both: with the container
        over WATCH, a child recycled over memory is replaced once it has gone.

        Why: a fresh child costs some tens of MB the moment it forks and starts
        its jobs, while the old one still holds all of its memory until its
        jobs end. Three children of a 600 MB container recycled at once near
        80 % took it to 97 % within 200 ms. Capacity dips by one child for as
        long as the old one takes to finish its jobs (at most memory_grace).
        """
        used, limit = self.used_mb, self.watch.container_mb
        if used is None or not limit or used < WATCH * limit:
            return False
        bound = self.config.memory_grace + self.config.shutdown_timeout + 2 * STOP_MARGIN
        self.holds[child.index] = (child.pid, time.monotonic() + bound)
        return True

    def release_holds(self) -> None:
        """Let the replacements held back for children now gone (or with room
        again, or past their bound) be forked."""
        limit = self.watch.container_mb or 0.0
        room = self.used_mb is not None and self.used_mb < WATCH * limit
        now = time.monotonic()
        for index, (pid, until) in list(self.holds.items()):
            if pid not in self.children.by_pid or room or now >= until:
                del self.holds[index]

    def push_back(self, child: Child) -> None:
        """No room for a recycled child to finish its jobs: it pushes them back now."""
        if self.stopper.push_back_now(child, self.usage()):
            log.warning(
                "child %d (pid %d): no room to finish its jobs (the container uses %s): "
                "pushing them back now",
                child.index,
                child.pid,
                self.usage(),
            )

    def kill(self, child: Child, size: float) -> None:
        """The last line: SIGKILL the largest child now; its jobs are requeued
        when it is reaped, blamed as exactly as for a crash (poison.py)."""
        limit = self.watch.container_mb or 0.0
        log.warning(
            "memory kill: child %d (pid %d), the largest (%.0f MB %s), SIGKILLed: the container "
            "uses %s, past the last line at %.0f%%; its jobs are requeued",
            child.index,
            child.pid,
            size,
            self.config.memory_metric,
            self.usage(),
            LAST_LINE * 100,
        )
        child.memory_cause = f"container memory at {self.used_mb or 0:.0f} of {limit:.0f} MB"
        child.memory_event = "was killed over the container's memory limit"
        child.restart_reason = "memory"
        self.stopper.expect(child, "memory kill")  # its exit is no crash: the cause says why
        self.stopper.kill(child, signal.SIGKILL)


def memory_base(cgroup: MemoryCgroup | None) -> tuple[int, str]:
    """What the container holds before any child: the group's usage (the
    master, and anything else in it: an embedded Redis, a sidecar), else the
    master's own RSS; in bytes, with what it is."""
    usage = cgroup.read() if cgroup is not None else None
    if usage is not None:
        return usage.working_set, "the group's usage before forking"
    return int((measure_mb(os.getpid(), "rss") or 0) * MB), "the master's RSS"
