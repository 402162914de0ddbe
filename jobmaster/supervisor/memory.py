"""The memory killer's decisions, from samples (the master measures and acts).

Why USS by default: with ``preload`` the children share the master's pages
copy-on-write. RSS (and, in part, PSS) counts those shared pages in every
child, so a 400 MB preloaded app makes each child "400 MB" while killing it
would free almost nothing. USS is what a child's death would give back.

Per child, against ``max_child_mb``: three samples in a row over it before a
recycle, so a job that briefly holds a big buffer does not cost its child a
recycle; but a child FAR_OVER its limit is recycled at once, since a child
growing 20 MB/s would be 200-300 MB past its limit by the third sample.

The container, against the limit of our cgroup (jobmaster/cgroups.py), by
the cgroup's own usage less its inactive page cache: what the kernel
compares, master, page cache and an embedded Redis included, not only the
children. Every child counts, leaving ones too (a retiring child still
holds its memory until it is gone). As usage rises:

- Between samples, the cgroup's usage alone (one file read) at each pass of
  the master's loop, at most every POLL: at the default
  memory_check_interval of 5 s, three children leaking 20 MB/s took a
  600 MB group from 50 % to its OOM kill between two samples.
- WATCH (70 %), CLOSE (85 %): sample every 500 ms, then every 200 ms
  (likewise when a child nears its own limit): a leak of a few tens of MB/s
  crosses the last 15 % in a few seconds, between two samples at the default
  memory_check_interval of 5 s. (Every second above 70 % let a child growing
  50 MB/s in a 600 MB group jump from under 85 % to 97 % between samples.)
- GUARD (90 %): the largest serving child over its share (below) is
  recycled (replacement first, graceful); again at the next sample while
  what is left once the leaving children are gone would still be over the
  line. Over this line there is no room: a child recycled over memory
  pushes its jobs back now instead of finishing them within memory_grace,
  since finishing them is what could take the container over its limit.
- LAST_LINE (95 %): the master SIGKILLs the largest child over its share,
  leaving ones included, if its death brings usage back under the line, and
  requeues its jobs, blaming them exactly as for a crash (poison.py). The
  kernel's OOM killer would pick a victim by its own rules (possibly the
  master) a moment later; this way jobmaster chooses, says why, and a job
  that bloats its child every time still ends in the dead set. One kill at
  a time: the next waits until the killed child is reaped and a new sample
  says it was not enough.

Whose growth it is (SPEC §9). A child's size is its whole process tree
(memory_policy.py measures its subprocesses too), so the cgroup's usage
splits into what the children hold and the rest (the master, an embedded
Redis, tmpfs files, a sidecar). The guard and the last line act on a child
only if it is *guilty*: over its share of the container (``share``: what
"auto" would give it, or max_child_mb if smaller), and, for the kill, only
if killing it brings usage back under the line. Otherwise the growth is not
the children's: killing one would free little, its replacement would grow
back, and its innocent jobs would be blamed until buried (a 450 MB tmpfs
file made an 80 MB job die three times). Then nothing is killed or
blamed, and the master logs what holds the memory (``Actions.not_ours``).
A kill that freed less than half of what the child held (something else
grew meanwhile, or the usage does not follow the children at all) stops
the kills until usage falls under GUARD: never a kill loop. Memory kills
back off like crashes too (the master's Respawns).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobmaster.procmem import MB, measure_mb

__all__ = ["MB", "Actions", "MemoryWatch", "Reading", "auto_limit_mb", "measure_mb", "pace"]

CONSECUTIVE = 3  # samples in a row over max_child_mb before a recycle
FAR_OVER = 1.25  # this far over max_child_mb: recycled at the first sample
WATCH, WATCH_INTERVAL = 0.70, 0.5  # share of a limit, seconds between samples above it
CLOSE, CLOSE_INTERVAL = 0.85, 0.2
POLL = 0.25  # seconds between two reads of the cgroup's usage alone, between samples
GUARD = 0.90  # the container: recycle the largest child; no room to finish jobs
LAST_LINE = 0.95  # the container: the master kills the largest child itself
# "auto": the children's limits together fill this share of the container,
# less what the master (and whatever else is in the group) holds at start.
# The rest is room for a recycle to happen in: the old child finishes its
# jobs beside its replacement, while the others go on growing.
AUTO_FILL = 0.80


def auto_limit_mb(limit_bytes: int, base_bytes: int, processes: int) -> int:
    """Each child's share of AUTO_FILL of the container, after ``base_bytes``
    (the group's usage before any child is forked)."""
    share = (limit_bytes * AUTO_FILL - base_bytes) / max(1, processes)
    return max(1, int(share / MB))


def pace(share: float, interval: float) -> float:
    """Seconds between samples with usage at ``share`` of a limit (memory_check_interval
    ``interval`` far from any limit, never slower than it)."""
    if share >= CLOSE:
        return min(interval, CLOSE_INTERVAL)
    if share >= WATCH:
        return min(interval, WATCH_INTERVAL)
    return interval


@dataclass(frozen=True)
class Reading:
    """One sample: every child's size, and the container's usage."""

    sizes: dict[int, float]  # pid -> MB, every child measured (leaving ones too)
    leaving: frozenset[int] = frozenset()  # asked to go: they give their memory back soon
    starting: frozenset[int] = frozenset()  # not ready yet: counted, not judged on their own
    recycled: frozenset[int] = frozenset()  # leaving over memory: may be told to push back
    used_mb: float | None = None  # the cgroup's working set; None: not readable
    master_mb: float = 0.0  # for an estimate when used_mb is None


@dataclass
class Actions:
    recycle: list[tuple[int, float, str]] = field(default_factory=list)  # pid, MB, why
    push_back: list[int] = field(default_factory=list)  # no room: push back jobs now
    kill: tuple[int, float] | None = None  # the last line: pid, MB
    used_mb: float | None = None  # the container's usage, as judged
    interval: float = 0.0  # seconds to the next sample
    # Over the guard (or the last line), but no child is to blame: (the
    # children's MB, the rest's MB), for a log line of what holds the memory.
    not_ours: tuple[float, float] | None = None
    # A kill that freed too little: (the child's MB, the MB its death freed).
    freed_little: tuple[float, float] | None = None


@dataclass
class MemoryWatch:
    """Decides, from samples, which children to recycle, push back or kill."""

    limit_mb: float  # per child; 0 = off
    container_mb: float | None = None  # our cgroup's limit
    interval: float = 5.0  # memory_check_interval: the pace with nothing near a limit
    # Each child's share of the container (MB): what "auto" gives it (the
    # container's AUTO_FILL less what it held before any fork, shared by
    # ``processes``); 0: AUTO_FILL of the container shared by the children.
    share_mb: float = 0.0
    processes: int = 0  # the pool share_mb is for: more children (TTIN) share it
    over: dict[int, int] = field(default_factory=dict)  # pid -> samples in a row over
    before: dict[int, float] = field(default_factory=dict)  # pid -> MB at its last sample
    killed: set[int] = field(default_factory=set)  # last-line kills not yet reaped
    told: set[int] = field(default_factory=set)  # told to push back already
    # The last kill: (pid, its MB, the usage then), until a sample after its reap.
    last_kill: tuple[int, float, float] | None = None
    braked: bool = False  # a kill freed too little: no kill until usage is under GUARD

    @property
    def active(self) -> bool:
        return bool(self.limit_mb or self.container_mb)

    def decide(self, reading: Reading, alive: set[int]) -> Actions:
        """What to do after ``reading``; ``alive``: the children in the table."""
        self.killed &= alive
        self.told &= alive
        judged = reading.leaving | reading.starting
        serving = {p: s for p, s in reading.sizes.items() if p not in judged}
        actions = Actions(recycle=self.over_limit(serving), interval=self.interval)
        used = reading.used_mb
        if used is None and self.container_mb:
            used = reading.master_mb + sum(reading.sizes.values())  # our processes only
        actions.used_mb = used
        pressure = 0.0  # the highest share of a limit: the pace of the next sample
        if self.limit_mb:
            pressure = max((s / self.limit_mb for s in serving.values()), default=0.0)
        if self.container_mb and used is not None:
            pressure = max(pressure, used / self.container_mb)
            self.container(reading, used, actions, serving)
        actions.interval = pace(pressure, self.interval)
        return actions

    def over_limit(self, sizes: dict[int, float]) -> list[tuple[int, float, str]]:
        """Children over the limit CONSECUTIVE samples in a row, or that grew FAR_OVER
        it since the last sample.

        Only growth is "far": a child that is far over from its first sample
        (RSS counting a big preloaded app) would be as big again once
        replaced, and recycled at once for ever; it waits its three samples.
        """
        for pid in list(self.over):
            if pid not in sizes:
                del self.over[pid]  # gone, leaving, or not measured
                self.before.pop(pid, None)
        if not self.limit_mb:
            return []
        found = []
        far = FAR_OVER * self.limit_mb
        for pid, size in sizes.items():
            self.over[pid] = self.over.get(pid, 0) + 1 if size > self.limit_mb else 0
            grew = self.before.get(pid, far) < far
            self.before[pid] = size
            if size >= far and grew:
                found.append((pid, size, "far"))
            elif self.over[pid] >= CONSECUTIVE:
                found.append((pid, size, "limit"))
            else:
                continue
            self.over[pid] = 0
        return found

    def share(self, children: int, staying: int = 0) -> float:
        """A child's share of the container, in MB (see the module's docstring):
        of ``children`` measured, ``staying`` not leaving (a child and its
        replacement beside it during a recycle share one slot)."""
        share = self.share_mb or AUTO_FILL * (self.container_mb or 0.0) / max(1, children)
        if self.share_mb and self.processes and staying > self.processes:
            share = self.share_mb * self.processes / staying
        return min(share, self.limit_mb) if self.limit_mb else share

    def container(
        self, reading: Reading, used: float, actions: Actions, serving: dict[int, float]
    ) -> None:
        """The guard and the last line (see the module's docstring)."""
        limit = self.container_mb or 0.0
        sizes = reading.sizes
        share = self.share(len(sizes), len(sizes.keys() - reading.leaving))
        self.after_kill(used, actions)
        if used < GUARD * limit:
            self.braked = False
            return
        line = LAST_LINE * limit
        guilty = {p: s for p, s in sizes.items() if s > share}
        if used >= line and not self.killed and not self.braked and guilty:
            pid = max(guilty, key=lambda p: guilty[p])
            if used - guilty[pid] < line:  # its death brings usage back under the line
                self.killed.add(pid)
                self.last_kill = (pid, guilty[pid], used)
                actions.kill = (pid, guilty[pid])
                actions.recycle = [r for r in actions.recycle if r[0] != pid]
        for pid in sorted(reading.recycled - self.told - self.killed):
            self.told.add(pid)
            actions.push_back.append(pid)
        # What is on its way out gives its memory back soon: the guard acts
        # again only if the rest alone is over the line.
        chosen = {r[0] for r in actions.recycle} | self.killed
        leaving = sum(s for p, s in sizes.items() if p in reading.leaving or p in chosen)
        candidates = {p: s for p, s in serving.items() if p not in chosen and s > share}
        if used - leaving >= GUARD * limit and candidates:
            pid = max(candidates, key=lambda p: candidates[p])
            actions.recycle.append((pid, candidates[pid], "guard"))
        elif used - leaving >= GUARD * limit and actions.kill is None and not self.killed:
            children = sum(sizes.values())
            actions.not_ours = (children, max(0.0, used - children))

    def after_kill(self, used: float, actions: Actions) -> None:
        """The first sample after a killed child is reaped: did its death free
        what it held? If not, no kill until usage is under GUARD again."""
        if self.last_kill is None or self.last_kill[0] in self.killed:
            return
        _, size, before = self.last_kill
        self.last_kill = None
        if before - used < size / 2:
            self.braked = True
            actions.freed_little = (size, max(0.0, before - used))
