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
import time

from jobmaster.cgroups import MemoryCgroup, find_memory_cgroup
from jobmaster.config import Config
from jobmaster.pipes import RECYCLE, send_request
from jobmaster.procmem import Descendants
from jobmaster.supervisor.children import STARTING, Child, ChildTable
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

NOT_OURS_EVERY = 30.0  # seconds between two log lines saying the growth is not the children's


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
        self.shmem_mb = 0.0  # tmpfs/shm in the cgroup, at the last sample
        # slot -> (the pid its replacement waits for, the latest it waits: never for ever)
        self.holds: dict[int, tuple[int, float]] = {}
        self.last_check = self.next_check = self.next_poll = 0.0  # monotonic
        self.descendants = Descendants()  # each child's subprocesses (procmem.py)
        self.not_ours_logged = -NOT_OURS_EVERY  # monotonic

    @classmethod
    def build(cls, config: Config, children: ChildTable, stopper: Stopper) -> MemoryPolicy:
        cgroup = find_memory_cgroup(config.cgroup_root)
        container = cgroup.limit if cgroup is not None else None
        where = cgroup.describe() if cgroup is not None else "no memory cgroup"
        limit: float = 0.0
        share = 0.0
        if container is not None:
            base, what = memory_base(cgroup)
            share = auto_limit_mb(container, base, config.processes)
        if config.max_child_mb == "auto":
            if container is None:
                log.warning("max_child_mb = auto, but no container memory limit (%s): off", where)
            else:
                limit = share
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
        watch = MemoryWatch(
            limit, container_mb, config.memory_check_interval, share, config.processes
        )
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
        actions = watch.decide(self.read(), self.children.pids())
        self.last_check = time.monotonic()
        self.next_check = self.last_check + actions.interval
        self.used_mb = actions.used_mb
        metric, limit = self.config.memory_metric, f"{watch.limit_mb:.0f}"
        if actions.freed_little is not None:
            size, freed = actions.freed_little
            log.warning(
                "the last memory kill freed %.0f MB of the child's %.0f MB (the container uses "
                "%s): no more memory kills until it is under %.0f%%",
                freed,
                size,
                self.usage(),
                GUARD * 100,
            )
        if actions.not_ours is not None:
            self.report_not_ours(*actions.not_ours)
        if actions.kill is not None and (child := self.children.get(actions.kill[0])):
            self.kill(child, actions.kill[1])
        for pid in actions.push_back:
            if (child := self.children.get(pid)) is not None:
                self.push_back(child)
        for pid, size, why in actions.recycle:
            if (child := self.children.get(pid)) is None:
                continue
            if why == "guard":
                self.recycle(
                    child,
                    f"is the largest ({size:.0f} MB {metric}, over its share of "
                    f"{watch.share(len(self.children), len(self.children.serving())):.0f} MB) "
                    f"while the container uses "
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
        """Every child's size, its whole process tree (leaving ones included), and
        the cgroup's usage."""
        metric = self.config.memory_metric
        sizes = {}
        trees = self.descendants.update(self.children.pids())
        for child in self.children:
            size = measure_mb(child.pid, metric)
            if size is None:
                continue
            below = [measure_mb(pid, metric) or 0.0 for pid in trees.get(child.pid, ())]
            sizes[child.pid] = size + sum(below)
            log.debug(
                "child %d (pid %d): %.0f MB %s, %d subprocess(es) %.0f MB",
                child.index,
                child.pid,
                size,
                metric,
                len(below),
                sum(below),
            )
        usage = self.cgroup.read() if self.cgroup is not None else None
        if usage is not None and usage.oom_kills is not None:
            if self.oom_kills is not None and usage.oom_kills > self.oom_kills:
                log.error(
                    "the kernel OOM-killed %d process(es) in our cgroup (%s)",
                    usage.oom_kills - self.oom_kills,
                    self.usage(),
                )
            self.oom_kills = usage.oom_kills
        self.shmem_mb = usage.shmem / MB if usage is not None else 0.0
        leaving = [c for c in self.children if not c.serving]
        return Reading(
            sizes,
            leaving=frozenset(c.pid for c in leaving),
            starting=frozenset(c.pid for c in self.children.in_state(STARTING)),
            recycled=frozenset(c.pid for c in leaving if c.recycled_over_memory),
            used_mb=usage.working_set / MB if usage is not None else None,
            master_mb=(measure_mb(os.getpid(), "rss") or 0.0) if usage is None else 0.0,
        )

    def report_not_ours(self, children: float, rest: float) -> None:
        """Over the guard, and no child to blame: say what holds the memory
        (every NOT_OURS_EVERY seconds at most); nothing is killed or blamed."""
        now = time.monotonic()
        if now - self.not_ours_logged < NOT_OURS_EVERY:
            return
        self.not_ours_logged = now
        ours = set(self.children.pids()) | {os.getpid()}
        for tree in self.descendants.known.values():
            ours |= set(tree)
        others = []
        for pid in self.cgroup.pids() if self.cgroup is not None else []:
            if pid not in ours and (size := measure_mb(pid, "rss")) is not None:
                others.append((size, pid))
        biggest = ", ".join(f"pid {pid} {size:.0f} MB rss" for size, pid in sorted(others)[-3:])
        log.warning(
            "the container uses %s, but not by the children's growth: the children hold "
            "%.0f MB, the rest %.0f MB (the master, tmpfs/shm files %.0f MB%s): "
            "no child is killed or blamed for it",
            self.usage(),
            children,
            rest,
            self.shmem_mb,
            f", other processes: {biggest}" if biggest else "",
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
        held = self.room_is_short()
        note = (
            f"replacement once it has gone: the container uses {self.usage()}"
            if held
            else "replacement first"
        )
        if not self.stopper.recycle(child, reason, "memory", cause, note):
            return
        if held:
            self.hold(child)
        if not send_request(child.requests_fd, RECYCLE, cause):
            self.stopper.stop(child, reason)  # its pipe is gone or full: a plain graceful stop

    def room_is_short(self) -> bool:
        """Whether the container is over WATCH: a replacement waits (``hold``)."""
        used, limit = self.used_mb, self.watch.container_mb
        return used is not None and bool(limit) and used >= WATCH * (limit or 0.0)

    def hold(self, child: Child) -> None:
        """Replacement first only where there is room for both: with the container
        over WATCH, a child recycled over memory is replaced once it has gone.

        Why: a fresh child costs some tens of MB the moment it forks and starts
        its jobs, while the old one still holds all of its memory until its
        jobs end. Three children of a 600 MB container recycled at once near
        80 % took it to 97 % within 200 ms. Capacity dips by one child for as
        long as the old one takes to finish its jobs (at most memory_grace).
        """
        bound = self.config.memory_grace + self.config.shutdown_timeout + 2 * STOP_MARGIN
        self.holds[child.index] = (child.pid, time.monotonic() + bound)

    def release_holds(self) -> None:
        """Let the replacements held back for children now gone (or with room
        again, or past their bound) be forked."""
        limit = self.watch.container_mb or 0.0
        room = self.used_mb is not None and self.used_mb < WATCH * limit
        now = time.monotonic()
        for index, (pid, until) in list(self.holds.items()):
            if self.children.get(pid) is None or room or now >= until:
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
        """The last line: SIGKILL the largest child and its subprocesses now; its
        jobs are requeued when it is reaped, blamed as exactly as for a crash
        (poison.py)."""
        limit = self.watch.container_mb or 0.0
        cause = f"container memory at {self.used_mb or 0:.0f} of {limit:.0f} MB"
        if not self.stopper.kill_over_memory(child, cause):
            return
        below = self.descendants.kill(child.pid)
        log.warning(
            "memory kill: child %d (pid %d), the largest (%.0f MB %s%s), SIGKILLed: the "
            "container uses %s, past the last line at %.0f%%; its jobs are requeued",
            child.index,
            child.pid,
            size,
            self.config.memory_metric,
            f" with {len(below)} subprocess(es)" if below else "",
            self.usage(),
            LAST_LINE * 100,
        )

    def gone(self, child: Child) -> None:
        """A reaped child: the subprocesses recorded as its own are not left
        behind (SPEC §7), not even those in a session of their own, which the
        master's killpg of its group does not reach."""
        for pid in self.descendants.kill(child.pid):
            log.info(
                "child %d (pid %d) is gone: killed its subprocess %d", child.index, child.pid, pid
            )


def memory_base(cgroup: MemoryCgroup | None) -> tuple[int, str]:
    """What the container holds before any child: the group's usage (the
    master, and anything else in it: an embedded Redis, a sidecar), else the
    master's own RSS; in bytes, with what it is."""
    usage = cgroup.read() if cgroup is not None else None
    if usage is not None:
        return usage.working_set, "the group's usage before forking"
    return int((measure_mb(os.getpid(), "rss") or 0) * MB), "the master's RSS"
