"""Chaos run: thousands of jobs under kills, restarts and outages; nothing may be lost.

    .venv/bin/python bench/chaos.py --profile ci     # 5,000 jobs, under 3 minutes (.ci/run)
    .venv/bin/python bench/chaos.py --profile long   # 100,000 jobs, by hand

It starts a private ``redis-server`` (append-only persistence, a free port;
the shared Redis on 6379 is never touched) and ``jobmaster -c`` on it, pushes
every job up front (``chaos_jobs.work``: counts its start, sleeps a few ms,
records its completion), then, while they run:

- SIGKILLs a child every ~300 ms: a random child that has been up (ready,
  by its own log line) for at least ``--min-child-age`` seconds (default
  1.2). Killing younger ones would measure the master's crash-loop backoff,
  which parks a slot for up to 30 s (it resets only for a child that served
  1 s), instead of the requeue. The child is SIGSTOPped first, so the jobs
  it holds are counted exactly;
- at set points of progress (repeated ``--cycles`` times): TSTP and CONT;
  SIGTERM of the master and a restart, twice; HUP; TTIN then TTOU; a Redis
  SHUTDOWN and restart from its AOF; a SIGKILL of the master and a restart;
  a job that pushes its child over ``max_child_mb``; then the disruptions of
  issue 14, each bringing its own jobs so that some are in flight whatever
  is left of the backlog:
- ``deadline_stop``: TERM of the master while ``chaos_jobs.late`` jobs run
  past ``shutdown_timeout`` (short here) and end, failing or succeeding, the
  moment the stop has pushed them back; the pool is then scanned while it is
  down, and restarted. Their late outcome must not be recorded;
- ``broadcast``: HUP, TTIN, TTOU, USR1, TSTP and CONT each sent to every
  process of the pool at once (``systemctl kill``): the master must act, no
  child may die of it, stop (state T) or start a job again. A child left
  stopped is continued by the bench after it is counted, so the run goes on;
- ``stopped_past_ttl``: a child SIGSTOPped until a sibling has recovered
  its jobs (its heartbeat, short here, expired), then SIGCONTed: it must not
  record them as well;
- ``redis_pause``: ``CLIENT PAUSE ... ALL`` longer than jobmaster's socket
  timeout (shortened through the URL, see ``SOCKET_TIMEOUT``), with a child
  SIGKILLed meanwhile: the master must replace it without waiting for Redis;
- ``poison``: a job that SIGKILLs its own child after a moment, pushed among
  innocent jobs that run beside it: it must end dead after ``max_crashes``,
  they must not;
- ``recycle_term`` and ``recycle_cont``: the pool is restarted with
  ``max_jobs_per_child = 1`` and a long ``memory_grace``, so that children
  are recycled while jobs of RECYCLE_FUEL_MS run in them; then a TERM must
  stop it within ``shutdown_timeout`` (a TERM reaches a recycling child), or
  a TSTP and CONT must leave every recycling child quiet (none "resumed").
- ``forged_queue``: ``SET <ns>:queue:weird x``, and jobs whose payload says
  ``"queue": "weird"`` pushed by hand onto a served queue and into the
  scheduled set; the children running them are SIGKILLed. The master's
  requeue and the poller are refused by that key: each such job must end
  done or in the dead set with the reason ("could not be requeued"), never
  nowhere (SPEC §8); the key is deleted after;
- ``duplicates``: payloads LPUSHed twice, byte for byte (a producer that
  retried), with a child holding some of them SIGKILLed: each copy must run
  at least once, none may be left in an in-progress list (stranded), and
  their second copy is no extra run (``copies``).

A thread watches the state of every process of the pool all along: none may
be seen stopped (T) but those the bench SIGSTOPped itself.

At the end it prints (a table on stderr, JSON on stdout) and checks: jobs
enqueued, done, **lost** (neither done nor dead: must be 0), run more than
once (at most the jobs in flight at the disruptions that may rerun a job,
which the run counts: see ``report``), the dead set (the poison pills and
nothing else), each jid in one place at every scan (at each stop of the
pool and at the end), no late outcome after a push back, no process seen
stopped or child killed by a broadcast signal, seconds, each disruption's
count, and the exit code of every stop of the master. The exit status is 1
if any check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis
from harness import (
    Master,
    emit,
    exit_on_term,
    is_jobmaster,
    log_tail,
    machine_info,
    private_redis,
    text,
    write_config,
)

import jobmaster
from jobmaster import payload as wire
from jobmaster.embedded import RedisServerProcess
from jobmaster.keys import Keys

KEYS = Keys("jobmaster")
JOB, LATE_JOB, PILL_JOB = "chaos_jobs.work", "chaos_jobs.late", "chaos_jobs.pill"
DONE_KEY, RUNS_KEY, STARTS_KEY = "chaos:done", "chaos:runs", "chaos:starts"  # as chaos_jobs
LATE_KEY = "chaos:late"  # as chaos_jobs
INPROGRESS_PATTERN = KEYS.inprogress("*")

# Every in-progress list and its length, in one call (KEYS is fine on the
# bench's private server, whose key count is small). ARGV[1]: the pattern.
INFLIGHT_SCRIPT = """
local out = {}
for _, key in ipairs(redis.call('KEYS', ARGV[1])) do
  table.insert(out, key)
  table.insert(out, redis.call('LLEN', key))
end
return out
"""


@dataclass(frozen=True)
class Profile:
    jobs: int
    processes: int
    concurrency: int
    job_ms: float  # mean sleep of a job (uniform between 0 and twice this)
    deadline_s: float  # the run fails if the jobs are not all done by then
    cycles: int  # how many times the disruption schedule is played


PROFILES = {
    "ci": Profile(jobs=5_000, processes=4, concurrency=3, job_ms=40, deadline_s=150, cycles=1),
    "long": Profile(jobs=100_000, processes=4, concurrency=5, job_ms=10, deadline_s=3600, cycles=4),
}

# The disruptions of one cycle, at these fractions of the cycle's jobs done.
# The last five take seconds each (a heartbeat to expire, a poison pill to
# kill max_crashes children) and bring their own jobs: placed last, they
# don't push the others past the end of the backlog.
SCHEDULE = (
    (0.08, "quiet"),
    (0.16, "term_restart"),
    (0.26, "hup"),
    (0.36, "ttin_ttou"),
    (0.46, "redis_restart"),
    (0.56, "kill_master"),
    (0.66, "memory"),
    (0.76, "term_restart"),
    (0.80, "deadline_stop"),
    (0.84, "broadcast"),
    (0.88, "stopped_past_ttl"),
    (0.92, "redis_pause"),
    (0.96, "poison"),
    (0.965, "recycle_term"),
    (0.97, "recycle_cont"),
    (0.975, "forged_queue"),
    (0.98, "duplicates"),
)

MAX_CHILD_MB = 120
BLOAT_MB = 200
# Short, so a stop's deadline passes while the late jobs run; the work jobs
# take milliseconds, and HUP/TTOU drain children of the fuel jobs (below it).
SHUTDOWN_TIMEOUT = 2
REDIS_DOWN_S = 1.0
MAX_CRASHES = 20
# Short, so a SIGSTOPped child's heartbeat expires within the run; long
# enough that a Redis pause of PAUSE_S never lets a live one expire (a beat
# every HEARTBEAT_TTL / 3 s).
HEARTBEAT_TTL = 6
# jobmaster's socket timeout (connection.py: 10 s, not a setting), shortened
# for this run through the URL, whose query string wins over it (redis-py);
# the bench's jobs keep their own 5 s (chaos_jobs), longer than the pause.
SOCKET_TIMEOUT = 2
PAUSE_S = 3.0  # CLIENT PAUSE ALL: longer than SOCKET_TIMEOUT
REPLACED_WITHIN_S = 1.0  # a child killed during the pause is forked again by then
PILL_DELAY_S = 0.5  # a poison pill kills its child this long after it starts
POISON_INNOCENTS = 8  # innocent jobs pushed with a pill, per thread of the pool
FUEL_MS = 1000  # the broadcast's jobs: under SHUTDOWN_TIMEOUT, so a drain finishes them
STOPPED_FUEL_MS = 1500  # the stopped child's jobs: running when it is stopped
BROADCAST = (
    signal.SIGHUP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGUSR1,
    signal.SIGTSTP,
    signal.SIGCONT,
)
BROADCAST_NAMES = "|".join(sig.name for sig in BROADCAST)
# How the master logs a child's end: "child 2 (pid 9) died: SIGHUP; requeued ...",
# "... stopped (replaced (HUP)): SIGHUP", "... exited on its own (SIGHUP)".
KILLED_BY_BROADCAST = re.compile(rf"child \d+ \(pid (\d+)\) [^\n]*?\b({BROADCAST_NAMES})\b")
# The recycle disruptions: children recycled after each job, with a grace far
# longer than a stop's, while jobs longer than shutdown_timeout run in them.
RECYCLE_GRACE = 30
RECYCLE_FUEL_MS = 6000
RECYCLE_STOP_S = SHUTDOWN_TIMEOUT + 2.5  # a TERM's bound: never the recycle's grace
FORGED_QUEUE = "weird"  # its key holds a string: forged_queue's jobs name it
REFUSED = "could not be requeued"  # how the dead reason of a job its queue refused begins
BLOAT_QUEUE, POISON_QUEUE, LATE_QUEUE = "bloat", "poison", "late"
QUEUES = [BLOAT_QUEUE, POISON_QUEUE, LATE_QUEUE, "default"]  # strict: in this order


@dataclass
class Tally:
    """What the run did, and how many jobs were in flight when it did it."""

    counts: Counter[str] = field(default_factory=Counter)
    inflight_at_kills: int = 0  # child and master SIGKILLs
    inflight_at_redis_stops: int = 0  # Redis restarts and pauses
    pushed_back_at_deadlines: int = 0  # what the deadline stops pushed back
    inflight_at_stopped_children: int = 0  # held by a child SIGSTOPped past its heartbeat
    pushed_back_at_recycle_stops: int = 0  # what stops of a recycling pool pushed back
    requeued_at_poison_crashes: int = 0  # what the poison pills' dead children held
    innocents_blamed: int = 0  # innocent jobs seen with a crash counted against them
    stopped_by_chaos: set[int] = field(default_factory=set)  # pids we SIGSTOPped
    seen_stopped: dict[int, str] = field(default_factory=dict)  # others seen in state T
    scans: list[dict[str, Any]] = field(default_factory=list)  # one-place scans
    late_stops: list[tuple[float, list[str]]] = field(default_factory=list)  # (unix time, tokens)
    broadcast_fuel: list[str] = field(default_factory=list)
    pills: list[str] = field(default_factory=list)
    forged: list[str] = field(default_factory=list)  # tokens of forged_queue's jobs
    twins: list[str] = field(default_factory=list)  # tokens pushed twice by duplicates
    twins_stranded: int = 0  # copies left in an in-progress list once every copy ran
    pause_replaced_s: list[float | None] = field(default_factory=list)
    master_exit_codes: list[int | None] = field(default_factory=list)
    stop_seconds: list[float] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)  # disruptions without their effect
    events: list[dict[str, Any]] = field(default_factory=list)


class Chaos:
    def __init__(
        self, profile: Profile, tmp: Path, server: RedisServerProcess, args: argparse.Namespace
    ) -> None:
        self.profile = profile
        self.args = args
        self.rng = random.Random(args.seed)
        self.server = server  # append-only: its restart (do_redis_restart) must keep the jobs
        self.logfile = tmp / "master.log"
        self.tmp = tmp
        self.tally = Tally()
        self.total = 0
        self.started = time.monotonic()
        # The killer thread runs while this is set; disruptions clear it
        # (under the lock) so a kill never lands in the middle of one.
        self.kills_allowed = threading.Event()
        self.kill_lock = threading.Lock()
        self.finished = threading.Event()
        self.ready_at: dict[int, float] = {}
        self.log_offset = 0
        self.expected: set[str] = set()  # every token pushed
        self.jids: dict[str, str] = {}  # jid -> token
        self.copies: dict[str, int] = {}  # jid -> entries pushed, when more than one
        self.phase = "start"  # what the run is doing, for the state watcher
        self.fuel_pushed: Counter[str] = Counter()
        self.master: Master

    # -- setup -------------------------------------------------------------
    def start(self) -> None:
        self.conn = self.server.client(socket_timeout=10)
        self.inflight_script = self.conn.register_script(INFLIGHT_SCRIPT)
        self.master = self.pool(
            self.tmp, max_child_mb=MAX_CHILD_MB, memory_check_interval=1, memory_grace=5
        )
        self.enqueue()
        self.master.start()
        self.master.wait_children(self.profile.processes)

    def pool(self, folder: Path, **settings: Any) -> Master:
        """A master (not started) with the run's config in ``folder``, plus ``settings``."""
        config = write_config(
            folder,
            self.server.url,
            app=["chaos_jobs"],
            processes=self.profile.processes,
            concurrency=self.profile.concurrency,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
            poll_interval=0.5,
            heartbeat_ttl=HEARTBEAT_TTL,
            # A child dies about once a second here, so a job may be in three
            # killed children by bad luck alone: that is not a poison pill
            # (tests/process/test_master.py proves max_crashes on its own).
            max_crashes=MAX_CRASHES,
            # The disruptions' own jobs must not wait behind the whole backlog.
            queues=QUEUES,
            strict=True,
            **settings,
        )
        url = f"{self.server.url}?socket_timeout={SOCKET_TIMEOUT}"
        return Master(config, self.server.url, self.logfile, redis_url=url)

    def enqueue(self) -> None:
        mean = self.profile.job_ms
        self.push(
            [
                (JOB, [f"t{i}", round(self.rng.uniform(0, 2 * mean), 1)])
                for i in range(self.profile.jobs)
            ],
            "default",
        )

    def push(self, jobs: list[tuple[str, list[Any]]], queue: str) -> list[str]:
        """Push (job, args) pairs whose first argument is a new token; the tokens."""
        payloads = [wire.build(name, args, {}, queue=queue) for name, args in jobs]
        self.retrying(lambda: jobmaster.Client(self.server.url).push_payloads(payloads))
        tokens = [str(args[0]) for _, args in jobs]
        self.expected.update(tokens)
        self.jids.update((str(p["jid"]), token) for p, token in zip(payloads, tokens, strict=True))
        self.total = len(self.expected)
        return tokens

    def fuel(self, prefix: str, count: int, ms: float, queue: str = LATE_QUEUE) -> list[str]:
        """Jobs of a disruption's own, so that some are in flight during it."""
        cycle = self.fuel_pushed[prefix]
        self.fuel_pushed[prefix] += 1
        return self.push([(JOB, [f"{prefix}{cycle}_{i}", ms]) for i in range(count)], queue)

    def started_count(self, tokens: list[str]) -> int:
        found = self.retrying(lambda: self.conn.hmget(STARTS_KEY, tokens))
        return sum(1 for n in found if n is not None)

    def all_done(self, tokens: list[str]) -> bool:
        found = self.retrying(lambda: self.conn.smismember(DONE_KEY, tokens))
        return all(found)

    # -- what Redis says ------------------------------------------------------
    def inflight(self, pid: int | None = None) -> int:
        """Jobs in in-progress lists (of the child ``pid``, or all)."""
        reply = self.retrying(lambda: self.inflight_script(keys=[], args=[INPROGRESS_PATTERN]))
        pairs = zip(reply[::2], reply[1::2], strict=True)
        if pid is None:
            return sum(int(n) for _, n in pairs)
        return sum(int(n) for key, n in pairs if text(key).split(":")[-2] == str(pid))

    def done(self) -> int:
        return int(self.retrying(lambda: self.conn.scard(DONE_KEY)))

    def retrying(self, call: Callable[[], Any]) -> Any:
        """The bench's own reads survive the Redis restart it causes."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return call()
            except (redis.ConnectionError, redis.TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    # -- the killer thread ----------------------------------------------------
    def killer(self) -> None:
        while not self.finished.is_set():
            self.finished.wait(self.rng.uniform(0.2, 0.4))
            if not self.kills_allowed.is_set():
                continue
            with self.kill_lock:
                if self.kills_allowed.is_set():
                    self.kill_a_child()

    def kill_a_child(self) -> None:
        self.follow_ready()
        now = time.monotonic()
        old_enough = [
            pid
            for pid in self.master.children()
            if now - self.ready_at.get(pid, now) >= self.args.min_child_age
        ]
        if not old_enough:
            return
        victim = self.rng.choice(sorted(old_enough))
        with contextlib.suppress(ProcessLookupError):
            # Frozen, it can neither fetch nor acknowledge: the count is exact.
            self.tally.stopped_by_chaos.add(victim)  # before: the watcher may look at once
            os.kill(victim, signal.SIGSTOP)
            self.tally.inflight_at_kills += self.inflight(victim)
            os.kill(victim, signal.SIGKILL)
            self.tally.counts["child_sigkill"] += 1

    def old_children(self) -> list[int]:
        """Children ready for at least ``--min-child-age`` seconds (see above)."""
        self.follow_ready()
        now = time.monotonic()
        return sorted(
            pid
            for pid in self.master.children()
            if now - self.ready_at.get(pid, now) >= self.args.min_child_age
        )

    # -- the state watcher ----------------------------------------------------
    def watch_states(self) -> None:
        """Every 50 ms, the state of the master and each child: one stopped
        (T) that the bench did not SIGSTOP is a process a signal stopped."""
        while not self.finished.wait(0.05):
            master = self.master.pid if self.master.alive() else None
            pids = self.master.children() | ({master} if master else set())
            for pid in pids - self.tally.stopped_by_chaos - set(self.tally.seen_stopped):
                # Asked again after the look: the bench adds a pid before it
                # SIGSTOPs it, so a stop of ours seen here is in the set by now
                # (the difference above may be older than the stop).
                if process_state(pid) == "T" and pid not in self.tally.stopped_by_chaos:
                    role = "master" if pid == master else "child"
                    self.tally.seen_stopped[pid] = f"{role}, during {self.phase}"

    def stopped_children(self) -> set[int]:
        """Children in state T now that the bench did not stop itself."""
        return {
            pid
            for pid in self.master.children() - self.tally.stopped_by_chaos
            if process_state(pid) == "T"
        }

    def follow_ready(self) -> None:
        """Note when each child said it was up (the master's log, read from
        where the last call stopped): its age counts from then."""
        with self.logfile.open("rb") as log:
            log.seek(self.log_offset)
            chunk = log.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written waits
        self.log_offset += len(complete)
        now = time.monotonic()
        for pid in re.findall(rb"pid=(\d+) child=\d+: worker \S+ started", complete):
            self.ready_at.setdefault(int(pid), now)

    @contextlib.contextmanager
    def no_kills(self) -> Iterator[None]:
        with self.kill_lock:
            self.kills_allowed.clear()
        try:
            yield
        finally:
            self.kills_allowed.set()

    # -- disruptions ------------------------------------------------------------
    def event(self, name: str) -> None:
        at = time.monotonic() - self.started
        done = self.done()
        self.phase = name
        with self.no_kills():
            detail = getattr(self, f"do_{name}")()
        self.phase = "backlog"
        self.tally.counts[name] += 1
        if not detail.get("ok", True):
            self.tally.missed.append(name)
        self.tally.events.append({"event": name, "at_s": round(at, 2), "done": done, **detail})
        if not self.args.quiet:
            print(f"chaos: {at:7.2f}s  {done:>7} done  {name} {detail}", file=sys.stderr)

    def do_quiet(self) -> dict[str, Any]:
        # This TSTP's quiet only: a child resumed after an earlier one (the
        # cycle before, the broadcast's TSTP) said so in the log already, and
        # counted as quiet before this TSTP had reached it.
        offset = len(self.log())
        self.master.signal(signal.SIGTSTP)
        # Each child says when it stopped fetching; only then is "nothing
        # completes once the in-progress lists are empty" a fair test (a
        # child still starting would otherwise fetch after the check).
        # Judged on the children alive at each look: one SIGKILLed just before
        # the TSTP may still show in /proc for a moment, and never says it.
        quieted = self.wait(lambda: self.master.children() <= self.quiet_pids(offset), 15)
        drained = quieted and self.wait(lambda: self.inflight() == 0, 15)
        before = self.done()
        held_until = time.monotonic() + 1.0
        while time.monotonic() < held_until:  # quiet must hold: nothing completes
            time.sleep(0.05)
        held = drained and self.done() == before and self.inflight() == 0  # nor is fetched
        # What a failed drain left, and where: the child's log says the rest.
        left = {} if held else self.inflight_jids()
        self.master.signal(signal.SIGCONT)
        detail: dict[str, Any] = {"quieted": quieted, "drained": drained, "ok": held}
        return {**detail, "left": left} if left else detail

    def quiet_pids(self, offset: int) -> set[int]:
        """Children that said they went quiet in the log after ``offset``."""
        found = re.findall(r"pid=(\d+) child=\d+: quiet: no new jobs", self.log()[offset:])
        return {int(pid) for pid in found}

    def inflight_jids(self) -> dict[str, list[str]]:
        """Each in-progress list that is not empty: its owner and its jobs' tokens."""
        left: dict[str, list[str]] = {}
        for key in self.retrying(lambda: self.conn.keys(INPROGRESS_PATTERN)):
            for raw in self.retrying(lambda key=key: self.conn.lrange(key, 0, -1)):
                jid = str(json.loads(raw).get("jid"))
                owner = text(key).removeprefix(KEYS.inprogress(""))
                left.setdefault(owner, []).append(self.jids.get(jid, jid))
        return left

    def do_term_restart(self) -> dict[str, Any]:
        seconds, code = self.stop_master()
        self.scan("after a TERM")  # nothing runs: the one-place scan is exact
        self.master.start()
        self.master.wait_children(self.profile.processes)
        return {"stop_s": round(seconds, 2), "exit_code": code, "ok": code == 0}

    def stop_master(self) -> tuple[float, int | None]:
        seconds, code = self.master.stop(timeout=SHUTDOWN_TIMEOUT + 20)
        self.tally.master_exit_codes.append(code)
        self.tally.stop_seconds.append(round(seconds, 2))
        return seconds, code

    def do_deadline_stop(self) -> dict[str, Any]:
        """TERM while late jobs run past shutdown_timeout: each ends (half fail,
        half succeed) as soon as the stop pushed it back, before its child exits.

        What the stop pushed back counts towards the extra runs allowed (a late
        job that succeeded had run once); the pool is scanned while it is down.
        """
        cycle, count = self.tally.counts["deadline_stop"], 2 * self.profile.processes
        modes = ["fail" if i % 2 else "succeed" for i in range(count)]
        tokens = self.push(
            [(LATE_JOB, [f"late{cycle}_{i}", mode]) for i, mode in enumerate(modes)], LATE_QUEUE
        )
        running = self.wait(lambda: self.started_count(tokens) == count, 15)
        stopped_at, offset = time.time(), len(self.log())
        seconds, code = self.stop_master()
        self.tally.late_stops.append((stopped_at, tokens))
        found = re.findall(r"stopped: (\d+) job\(s\) pushed back", self.log()[offset:])
        pushed = sum(int(n) for n in found)
        self.tally.pushed_back_at_deadlines += pushed
        scan = self.scan("after a stop past its deadline")
        self.master.start()
        self.master.wait_children(self.profile.processes)
        return {
            "late_jobs": count,
            "running": running,
            "pushed_back": pushed,
            "stop_s": round(seconds, 2),
            "exit_code": code,
            "in_two_places": scan["violations"],
            "ok": running and code == 0 and pushed >= count,
        }

    def do_broadcast(self) -> dict[str, Any]:
        """Each signal of BROADCAST to the master and every child at once, while
        the broadcast's own jobs (FUEL_MS, less than shutdown_timeout) run.

        The master must act on each; the children must neither die of it
        (the log's account of each child's end), nor stop (state T: counted
        by the watcher, then SIGCONTed here so the run can go on), nor start
        one of these jobs twice (their starts: no kill happens meanwhile, and
        a drained child finishes them).
        """
        size = self.profile.processes * self.profile.concurrency
        tokens = self.fuel("b", 2 * size, FUEL_MS)
        self.tally.broadcast_fuel += tokens
        self.wait(lambda: self.started_count(tokens) >= size // 2, 15)
        effects, stopped = {}, {}
        for sig in BROADCAST:
            self.phase = f"broadcast {sig.name}"
            before, offset = self.master.children(), len(self.log())
            for pid in [*sorted(before), self.master.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            time.sleep(0.3)
            left_stopped = self.stopped_children()
            for pid in left_stopped:  # so the run goes on (the watcher counted them)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            stopped[sig.name] = len(left_stopped)
            effects[sig.name] = self.broadcast_effect(sig, before, offset)
        finished = self.wait(lambda: self.all_done(tokens), 60)
        return {
            "effects": effects,
            "stopped": stopped,
            "fuel_done": finished,
            "ok": all(effects.values()),
        }

    def broadcast_effect(self, sig: signal.Signals, before: set[int], offset: int) -> bool:
        """Whether the master did what ``sig`` asks of it (SPEC §7)."""
        wanted = self.profile.processes
        since = lambda: self.log()[offset:]  # noqa: E731
        if sig == signal.SIGHUP:
            told = lambda: re.search(r"rolling restart: replacing (\d+) children", since())  # noqa: E731
            return self.wait(
                lambda: (
                    (m := told()) is not None and len(before - self.master.children()) >= int(m[1])
                ),
                30,
            )
        if sig == signal.SIGTTIN:
            return self.wait(lambda: len(self.master.children()) >= wanted + 1, 15)
        if sig == signal.SIGTTOU:
            return self.wait(lambda: len(self.master.children()) <= wanted, 30)
        if sig == signal.SIGUSR1:
            return self.wait(lambda: "traceback of thread" in since(), 10)
        if sig == signal.SIGTSTP:
            quiet = r"pid=(\d+) child=\d+: quiet: no new jobs"
            return self.wait(
                lambda: self.master.children() <= {int(p) for p in re.findall(quiet, since())}, 15
            )
        return self.wait(lambda: "resuming children" in since(), 10)  # SIGCONT

    def do_stopped_past_ttl(self) -> dict[str, Any]:
        """A busy child SIGSTOPped until a sibling recovered its jobs (its
        heartbeat expired), then SIGCONTed. Its jobs may run again (counted
        in the allowance); it must not record them too (the scans and the
        attempts say so)."""
        size = self.profile.processes * self.profile.concurrency
        tokens = self.fuel("s", size, STOPPED_FUEL_MS)
        victim, held = None, 0

        def stop_a_busy_child() -> bool:
            """Stopped first, then counted (exact); continued again if idle."""
            nonlocal victim, held
            for pid in [p for p in self.old_children() if self.inflight(p)]:
                self.tally.stopped_by_chaos.add(pid)  # before: the watcher may look at once
                os.kill(pid, signal.SIGSTOP)
                victim, held = pid, self.inflight(pid)
                if held:
                    return True
                os.kill(pid, signal.SIGCONT)
            return False

        if not self.wait(stop_a_busy_child, 15) or victim is None:
            return {"ok": False, "why": "no busy child"}
        stopped_at = time.monotonic()
        self.tally.inflight_at_stopped_children += held
        # Expiry within HEARTBEAT_TTL of its last beat, then a sibling's next
        # orphan scan (every TTL / 2); held past the TTL even if that came sooner.
        recovered = self.wait(lambda: self.inflight(victim) == 0, 3 * HEARTBEAT_TTL)
        while time.monotonic() < stopped_at + HEARTBEAT_TTL + 1:
            time.sleep(0.05)
        stopped_s = time.monotonic() - stopped_at
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGCONT)
        finished = self.wait(lambda: self.all_done(tokens), 60)
        return {
            "held": held,
            "recovered": recovered,
            "stopped_s": round(stopped_s, 1),
            "fuel_done": finished,
            "ok": recovered and held > 0,
        }

    def do_redis_pause(self) -> dict[str, Any]:
        """CLIENT PAUSE ALL for PAUSE_S (> SOCKET_TIMEOUT) while jobs run, and a
        child SIGKILLed in it: the master must fork its replacement within
        REPLACED_WITHIN_S, Redis or not (SPEC §8). Jobs in flight count as at a
        Redis stop; the victim's as at a kill."""
        size = self.profile.processes * self.profile.concurrency
        tokens = self.fuel("p", 2 * size, 600)
        self.wait(lambda: self.inflight() >= size // 2, 15)
        old = self.old_children()
        if not old:
            return {"ok": False, "why": "no child old enough"}
        victim = self.rng.choice(old)
        self.tally.stopped_by_chaos.add(victim)
        os.kill(victim, signal.SIGSTOP)
        in_victim, inflight = self.inflight(victim), self.inflight()
        self.tally.inflight_at_kills += in_victim
        self.tally.inflight_at_redis_stops += inflight - in_victim
        before = self.master.children()
        self.conn.client_pause(int(PAUSE_S * 1000), all=True)
        paused_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        replaced = self.wait(lambda: bool(self.master.children() - before), PAUSE_S + 15)
        replaced_s = round(time.monotonic() - paused_at, 2) if replaced else None
        self.tally.pause_replaced_s.append(replaced_s)
        while time.monotonic() < paused_at + PAUSE_S:  # the bench's reads would wait too
            time.sleep(0.05)
        finished = self.wait(lambda: self.all_done(tokens), 60)
        return {"inflight": inflight, "replaced_s": replaced_s, "fuel_done": finished}

    def do_poison(self) -> dict[str, Any]:
        """A job that SIGKILLs its child PILL_DELAY_S after it starts, pushed
        among innocent jobs (STOPPED_FUEL_MS each, enough to keep every thread
        busy while the pill kills max_crashes children): wherever it runs,
        innocent jobs run beside it. It must reach the dead set, they must not.

        With max_crashes at MAX_CRASHES an innocent job is beside the pill at
        only a few of its crashes, so "no innocent dead" holds even where
        each crash is counted against every job of the child (issue 14, hole
        3). That counting shows on the payloads, which carry ``crash_count``:
        an innocent one seen with it, in a queue or an in-progress list, is
        reported (a figure: SPEC §8 says they are not counted against).
        What its dead children held (the master's "requeued N") counts in
        the allowance."""
        cycle, offset = self.tally.counts["poison"], len(self.log())
        count = POISON_INNOCENTS * self.profile.processes * self.profile.concurrency
        innocents = [(JOB, [f"i{cycle}_{i}", STOPPED_FUEL_MS]) for i in range(count)]
        pill = f"pill{cycle}"
        tokens = self.push(
            [*innocents[:2], (PILL_JOB, [pill, PILL_DELAY_S]), *innocents[2:]], POISON_QUEUE
        )
        self.tally.pills.append(pill)
        innocent = [t for t in tokens if t != pill]
        blamed: set[str] = set()
        deadline = time.monotonic() + 30 + 3 * MAX_CRASHES
        while not (buried := pill in self.dead_tokens()) and time.monotonic() < deadline:
            blamed |= self.blamed(set(innocent))
            time.sleep(0.1)
        settled = self.wait(lambda: self.settled_tokens(innocent), 60)
        since = self.log()[offset:]
        requeued = re.findall(r"died: [^;\n]*; requeued (\d+) job\(s\)", since)
        self.tally.requeued_at_poison_crashes += sum(int(n) for n in requeued)
        self.tally.innocents_blamed += len(blamed)
        return {
            "crashes": len(requeued),
            "buried": buried,
            "innocents": len(innocent),
            "innocents_counted_a_crash": len(blamed),
            "innocents_settled": settled,
            "innocents_dead": len(set(innocent) & set(self.dead_tokens())),
            "ok": buried,
        }

    def blamed(self, innocent: set[str]) -> set[str]:
        """Innocent tokens whose payload, queued or in progress, carries a crash."""
        keys = [KEYS.queue(POISON_QUEUE), *(text(k) for k in self.conn.keys(INPROGRESS_PATTERN))]
        found = set()
        for key in keys:
            for raw in self.retrying(lambda key=key: self.conn.lrange(key, 0, -1)):
                with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
                    payload = json.loads(raw)
                    token = str(payload["args"][0])
                    if token in innocent and payload.get("crash_count"):
                        found.add(token)
        return found

    def settled_tokens(self, tokens: list[str]) -> bool:
        """Every one of ``tokens`` done or dead (the wait ends when they settle)."""
        dead = set(self.dead_tokens())
        found = self.retrying(lambda: self.conn.smismember(DONE_KEY, tokens))
        return all(d or t in dead for t, d in zip(tokens, found, strict=True))

    def do_hup(self) -> dict[str, Any]:
        """Every child the master retires for the HUP goes (a child still
        starting at that moment is already a fresh fork: it is kept).

        Judged by the pids alive before the HUP that are gone since, counted
        against the master's own "replacing N": a child SIGKILLed just before
        the HUP, not yet reaped, is among the N but leaves as "died", not as
        "stopped (replaced (HUP))".
        """
        before, offset = self.master.children(), len(self.log())
        self.master.signal(signal.SIGHUP)

        def retired() -> int | None:
            told = re.search(r"rolling restart: replacing (\d+) children", self.log()[offset:])
            if told is None:
                return None
            gone = len(before - self.master.children())
            return gone if gone >= int(told[1]) else None

        replaced = self.wait(lambda: retired() is not None, 30)
        return {"replaced": retired() or 0, "ok": replaced}

    def do_ttin_ttou(self) -> dict[str, Any]:
        wanted = self.profile.processes
        self.master.signal(signal.SIGTTIN)
        grew = self.wait(lambda: len(self.master.children()) >= wanted + 1, 15)
        self.master.signal(signal.SIGTTOU)
        shrank = self.wait(lambda: len(self.master.children()) <= wanted, 30)
        return {"grew": grew, "shrank": shrank, "ok": grew and shrank}

    def do_redis_restart(self) -> dict[str, Any]:
        inflight = self.inflight()
        self.tally.inflight_at_redis_stops += inflight
        self.server.stop()
        down_until = time.monotonic() + REDIS_DOWN_S
        while time.monotonic() < down_until:  # a real outage, of a set length
            time.sleep(0.05)
        self.server.start()
        return {"inflight": inflight}

    def do_kill_master(self) -> dict[str, Any]:
        inflight = self.inflight()
        self.tally.inflight_at_kills += inflight
        self.master.signal(signal.SIGKILL)
        self.master.wait_exit(10)
        # Its children notice the death and stop gracefully on their own; the
        # new master serves beside them meanwhile.
        self.master.start()
        self.master.wait_children(self.profile.processes)
        return {"inflight": inflight}

    def do_memory(self) -> dict[str, Any]:
        self.push([(JOB, [f"bloat{self.tally.counts['memory']}", 0, BLOAT_MB])], BLOAT_QUEUE)
        pattern = re.compile(r"recycling it .*|over max_child_mb")
        seen_before = len(pattern.findall(self.log()))
        recycled = self.wait(lambda: len(pattern.findall(self.log())) > seen_before, 30)
        return {"ok": recycled}

    # -- recycles under TERM and CONT (SPEC §7) ------------------------------------
    def recycling_pool(self) -> Master:
        """The pool, restarted with max_jobs_per_child = 1 (its own config)."""
        folder = self.tmp / "recycling"
        folder.mkdir(exist_ok=True)
        return self.pool(folder, max_jobs_per_child=1, memory_grace=RECYCLE_GRACE)

    @contextlib.contextmanager
    def recycling(self, prefix: str) -> Iterator[tuple[Master, int]]:
        """The usual pool stopped, the recycling one started with its jobs (long
        ones and quick ones, in LATE_QUEUE: first in line) until its children
        recycle while long ones run; yields it and the log's offset, then stops
        it (counting what it pushed back) and restarts the usual pool."""
        self.stop_master()
        usual, offset = self.master, len(self.log())
        self.master = self.recycling_pool()
        # Two long jobs to a quick one, interleaved: a child's threads take a
        # mix, and the first quick one to end recycles its child while its
        # long ones run.
        jobs = [
            (JOB, [f"{prefix}_{i}", 0 if i % 3 == 2 else RECYCLE_FUEL_MS])
            for i in range(self.profile.processes * self.profile.concurrency)
        ]
        tokens: list[str] = []
        try:
            self.master.start()
            self.master.wait_children(self.profile.processes)
            tokens = self.push(jobs, LATE_QUEUE)
            self.wait(lambda: self.busy_recycling(offset), 20)
            yield self.master, offset
        finally:
            if self.master.alive():
                self.stop_master()
            self.scan(f"after a stop of the recycling pool ({prefix})")
            # Its long jobs, pushed back, end in a pool of their own: under the
            # usual pool's kill every ~300 ms, a 6 s job would die MAX_CRASHES
            # times and be buried.
            self.master = self.recycling_pool()
            self.master.start()
            self.master.wait_children(self.profile.processes)  # never a TERM before its handlers
            self.wait(lambda: self.all_done(tokens), 60)
            self.stop_master()
            found = re.findall(r"stopped: (\d+) job\(s\) pushed back", self.log()[offset:])
            self.tally.pushed_back_at_recycle_stops += sum(int(n) for n in found)
            self.master = usual
            self.master.start()
            self.master.wait_children(self.profile.processes)

    def busy_recycling(self, offset: int) -> list[int]:
        """Recycling children (since ``offset``) that still hold jobs."""
        return [pid for pid in sorted(self.recycling_pids(offset)) if self.inflight(pid)]

    def recycling_pids(self, offset: int) -> set[int]:
        """Children that began their recycle since ``offset`` of the log."""
        found = re.findall(r"pid=(\d+) child=\d+: reached max_jobs_per_child", self.log()[offset:])
        return {int(pid) for pid in found}

    def do_recycle_term(self) -> dict[str, Any]:
        """A TERM while children are being recycled (their grace 30 s, their jobs
        6 s): it reaches them, and the pool stops within shutdown_timeout."""
        with self.recycling(f"rt{self.tally.counts['recycle_term']}") as (_, offset):
            busy = len(self.busy_recycling(offset))
            seconds, code = self.stop_master()
        ok = busy > 0 and code == 0 and seconds < RECYCLE_STOP_S
        return {"busy_recycling": busy, "stop_s": round(seconds, 2), "exit_code": code, "ok": ok}

    def do_recycle_cont(self) -> dict[str, Any]:
        """TSTP and CONT while children are being recycled: no recycling child
        fetches again (none says "resumed"); the jobs pushed after the CONT are
        run by the others."""
        with self.recycling(f"rc{self.tally.counts['recycle_cont']}") as (pool, offset):
            pool.signal(signal.SIGTSTP)
            quieted = self.wait(lambda: "quieting children" in self.log()[offset:], 10)
            pool.signal(signal.SIGCONT)
            resumed = self.wait(lambda: "resuming children" in self.log()[offset:], 10)
            recycling = set(self.busy_recycling(offset))
            after = self.fuel("rc_after", self.profile.processes * self.profile.concurrency, 0)
            done = self.wait(lambda: self.all_done(after), 60)
            log = self.log()[offset:]
            woken = {int(p) for p in re.findall(r"pid=(\d+) child=\d+: resumed: fetching", log)}
            refetched = sorted(woken & recycling)
        ok = quieted and resumed and bool(recycling) and done and not refetched
        return {
            "busy_recycling": len(recycling),
            "refetched": refetched,
            "after_done": done,
            "ok": ok,
        }

    def do_forged_queue(self) -> dict[str, Any]:
        """Jobs naming a queue whose key holds a string (FORGED_QUEUE), pushed by
        hand onto the late queue (served) and into the scheduled set (due now);
        each child running one is SIGKILLed. The master's crash triage and the
        poller take the queue from the payload and are refused: each job must
        end done, or dead with REFUSED's reason (not in any key: lost)."""
        cycle, size = self.tally.counts["forged_queue"], self.profile.processes
        queue_key = KEYS.queue(FORGED_QUEUE)
        self.retrying(lambda: self.conn.set(queue_key, "forged"))
        running = [
            wire.build(JOB, [f"f{cycle}_{i}", 3000], {}, queue=FORGED_QUEUE) for i in range(size)
        ]
        due = [wire.build(JOB, [f"fs{cycle}_{i}", 0], {}, queue=FORGED_QUEUE) for i in range(size)]
        now = time.time()
        for payload in running:
            payload["enqueued_at"] = now
        self.retrying(lambda: self.conn.lpush(KEYS.queue(LATE_QUEUE), *map(wire.encode, running)))
        self.retrying(lambda: self.conn.zadd(KEYS.scheduled, {wire.encode(p): now for p in due}))
        tokens = self.note_pushed([*running, *due])
        self.tally.forged += tokens
        killed = 0
        if self.wait(lambda: self.started_count(tokens[:size]) == size, 15):
            # Young children too: they were forked by the poison's crashes just
            # before, and one kill of each costs a backoff of 0.1 s at most.
            for pid in [p for p in self.master.children() if self.holds(p, FORGED_QUEUE)]:
                self.tally.stopped_by_chaos.add(pid)
                os.kill(pid, signal.SIGSTOP)
                self.tally.inflight_at_kills += self.inflight(pid)
                os.kill(pid, signal.SIGKILL)
                killed += 1
        settled = self.wait(lambda: self.settled_tokens(tokens), 30)
        refused = len(set(tokens) & self.refused_tokens())
        self.retrying(lambda: self.conn.delete(queue_key))
        return {
            "jobs": len(tokens),
            "children_killed": killed,
            "refused": refused,
            "settled": settled,
            "ok": settled and killed > 0 and refused > 0,
        }

    def do_duplicates(self) -> dict[str, Any]:
        """Each payload LPUSHed twice, byte for byte, onto the late queue, and a
        child holding some of them SIGKILLed: every copy must run (a token's
        runs >= 2) and none may stay in an in-progress list once they have."""
        cycle = self.tally.counts["duplicates"]
        count = self.profile.processes * self.profile.concurrency
        payloads = [
            wire.build(JOB, [f"d{cycle}_{i}", 800], {}, queue=LATE_QUEUE) for i in range(count)
        ]
        now = time.time()
        raws = []
        for payload in payloads:
            payload["enqueued_at"] = now
            raws += [wire.encode(payload)] * 2
        self.retrying(lambda: self.conn.lpush(KEYS.queue(LATE_QUEUE), *raws))
        tokens = self.note_pushed(payloads, copies=2)
        self.tally.twins += tokens
        killed = 0
        if self.wait(lambda: self.started_count(tokens) >= count // 2, 15):
            # Young children too, as in forged_queue, which forks some just before.
            busy = [p for p in self.master.children() if self.inflight(p)]
            if busy:
                victim = self.rng.choice(busy)
                self.tally.stopped_by_chaos.add(victim)
                os.kill(victim, signal.SIGSTOP)
                self.tally.inflight_at_kills += self.inflight(victim)
                os.kill(victim, signal.SIGKILL)
                killed = 1
        ran = self.wait(lambda: self.runs_at_least(tokens, 2), 60)
        # What is left in progress once every copy ran is stranded: gone at
        # once when each copy is acknowledged on its own.
        self.wait(lambda: not self.held_jids({str(p["jid"]) for p in payloads}), 3)
        stranded = len(self.held_jids({str(p["jid"]) for p in payloads}))
        self.tally.twins_stranded += stranded
        return {
            "pushed_twice": count,
            "children_killed": killed,
            "every_copy_ran": ran,
            "stranded": stranded,
            "ok": ran and not stranded,
        }

    def note_pushed(self, payloads: list[dict[str, Any]], copies: int = 1) -> list[str]:
        """Payloads pushed by hand (not through push): expected, by token."""
        tokens = [str(p["args"][0]) for p in payloads]  # type: ignore[index]
        self.expected.update(tokens)
        for payload, token in zip(payloads, tokens, strict=True):
            self.jids[str(payload["jid"])] = token
            if copies > 1:
                self.copies[str(payload["jid"])] = copies
        self.total = len(self.expected)
        return tokens

    def holds(self, pid: int, queue: str) -> bool:
        """Whether the child ``pid``'s in-progress list holds a job of ``queue``."""
        marker = f'"queue":"{queue}"'.encode()
        keys = [
            k
            for k in self.retrying(lambda: self.conn.keys(INPROGRESS_PATTERN))
            if text(k).split(":")[-2] == str(pid)
        ]
        return any(marker in raw for k in keys for raw in self.conn.lrange(k, 0, -1))

    def held_jids(self, jids: set[str]) -> set[str]:
        """Those of ``jids`` found in an in-progress list."""
        found = set()
        for key in self.retrying(lambda: self.conn.keys(INPROGRESS_PATTERN)):
            for raw in self.retrying(lambda key=key: self.conn.lrange(key, 0, -1)):
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    if (jid := str(json.loads(raw)["jid"])) in jids:
                        found.add(jid)
        return found

    def runs_at_least(self, tokens: list[str], runs: int) -> bool:
        found = self.retrying(lambda: self.conn.hmget(RUNS_KEY, tokens))
        return all(int(n or 0) >= runs for n in found)

    def refused_tokens(self) -> set[str]:
        """Tokens in the dead set because their queue refused them (REFUSED)."""
        tokens = set()
        for raw in self.retrying(lambda: self.conn.zrange(KEYS.dead, 0, -1)):
            with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
                entry = json.loads(raw)
                if str(entry.get("dead_reason", "")).startswith(REFUSED):
                    tokens.add(str(entry["args"][0]))
        return tokens

    # -- the run ------------------------------------------------------------------
    def log(self) -> str:
        return self.logfile.read_text(errors="replace")

    def wait(self, check: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(0.05)
        return False

    def settled(self) -> bool:
        """Every job done or dead, and nothing queued, scheduled or in flight."""
        pipe = self.conn.pipeline(transaction=False)
        pipe.scard(DONE_KEY)
        pipe.zcard(KEYS.dead)
        for queue in QUEUES:
            pipe.llen(KEYS.queue(queue))
        pipe.zcard(KEYS.retry)
        pipe.zcard(KEYS.scheduled)
        done, dead, *waiting = self.retrying(pipe.execute)
        return done + dead >= self.total and not any(waiting)

    def run(self) -> bool:
        """Play the schedule; True if every job settled before the deadline."""
        points = [
            ((cycle + fraction) / self.profile.cycles, name)
            for cycle in range(self.profile.cycles)
            for fraction, name in SCHEDULE
        ]
        killer = threading.Thread(target=self.killer, name="killer", daemon=True)
        watcher = threading.Thread(target=self.watch_states, name="watcher", daemon=True)
        self.kills_allowed.set()
        self.phase = "backlog"
        killer.start()
        watcher.start()
        deadline = self.started + self.profile.deadline_s
        try:
            while time.monotonic() < deadline:
                if not self.master.alive():
                    raise RuntimeError(f"master exited on its own\n{log_tail(self.logfile)}")
                progress = self.done() / self.profile.jobs
                while points and progress >= points[0][0]:
                    self.event(points.pop(0)[1])
                if not points and self.settled() and self.inflight() == 0:
                    return True
                time.sleep(0.1)
            return False
        finally:
            self.finished.set()
            killer.join(timeout=5)
            watcher.join(timeout=5)

    # -- one place at a time ---------------------------------------------------------
    def places(self) -> dict[str, list[str]]:
        """jid -> every place it is in: each queue, in-progress list, the
        scheduled, retry and dead sets (an entry twice in one counts twice)."""
        conn, found = self.conn, {}
        lists = [text(k) for k in conn.keys(KEYS.queue("*"))]
        lists += [text(k) for k in conn.keys(INPROGRESS_PATTERN)]
        for key in lists:
            found[key] = conn.lrange(key, 0, -1)
        for key in (KEYS.scheduled, KEYS.retry, KEYS.dead):
            found[key] = conn.zrange(key, 0, -1)
        where: dict[str, list[str]] = {}
        for key, entries in found.items():
            place = key.removeprefix(KEYS.prefix)
            for raw in entries:
                try:
                    jid = str(json.loads(raw)["jid"])
                except (ValueError, KeyError, TypeError):
                    jid = f"unreadable entry in {place}"
                where.setdefault(jid, []).append(place)
        return where

    def completions(self, jids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """jid -> its recorded attempts (jobmaster's history: one per FINISH)."""
        history: dict[str, list[dict[str, Any]]] = {}
        for start in range(0, len(jids), 2000):
            chunk = jids[start : start + 2000]
            pipe = self.conn.pipeline(transaction=False)
            for jid in chunk:
                pipe.lrange(KEYS.attempts(jid), 0, -1)
            for jid, attempts in zip(chunk, pipe.execute(), strict=True):
                history[jid] = [json.loads(a) for a in attempts]
        return history

    def scan(self, label: str, every_job: bool = False) -> dict[str, Any]:
        """One place at a time (SPEC §8), read while no worker runs: a jid in two
        places, one finished (a ``complete`` attempt recorded) and still in a
        place, or finished twice. ``every_job``: all jids, not only those in a
        place (at the end, when the places are empty)."""
        where = self.retrying(self.places)
        jids = sorted(set(self.jids) | set(where)) if every_job else sorted(where)
        history = self.retrying(lambda: self.completions(jids))
        complete = {j: sum(a.get("outcome") == "complete" for a in h) for j, h in history.items()}
        copies = self.copies  # a job pushed twice is two entries, each finished once
        two_places = {j: p for j, p in where.items() if len(p) > copies.get(j, 1)}
        finished_somewhere = {
            j: p for j, p in where.items() if complete.get(j, 0) + len(p) > copies.get(j, 1)
        }
        finished_twice = sorted(j for j, n in complete.items() if n > copies.get(j, 1))
        bad = set(two_places) | set(finished_somewhere) | set(finished_twice)
        result = {
            "at": label,
            "jobs_in_places": len(where),
            "in_two_places": len(two_places),
            "finished_and_in_a_place": len(finished_somewhere),
            "finished_twice": len(finished_twice),
            "violations": len(bad),
            "sample": [
                {
                    "jid": j,
                    "token": self.jids.get(j),
                    "places": where.get(j, []),
                    "complete": complete.get(j),
                }
                for j in sorted(bad)[:5]
            ],
        }
        self.tally.scans.append(result)
        return result

    # -- the verdict ----------------------------------------------------------------
    def dead_tokens(self) -> list[str]:
        tokens = []
        for raw in self.retrying(lambda: self.conn.zrange(KEYS.dead, 0, -1)):
            with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
                tokens.append(str(json.loads(raw)["args"][0]))
        return tokens

    def late_outcomes(self) -> tuple[int, int]:
        """(late jobs the stops pushed back, outcomes recorded for their runs that
        began before the stop). Such a run ends only once it saw its entry pushed
        back, so any outcome recorded for it is a late one."""
        pushed, late = 0, 0
        by_token = {t: j for j, t in self.jids.items()}
        for stopped_at, tokens in self.tally.late_stops:
            seen = self.conn.hmget(LATE_KEY, tokens)
            mine = [t for t, s in zip(tokens, seen, strict=True) if text(s or b"") == "pushed back"]
            pushed += len(mine)
            history = self.completions([by_token[t] for t in mine])
            late += sum(
                1 for h in history.values() for a in h if a.get("started_at", 0) < stopped_at
            )
        return pushed, late

    def report(self, settled: bool, seconds: float) -> dict[str, Any]:
        stop_s, code = self.master.stop(timeout=SHUTDOWN_TIMEOUT + 20)
        self.tally.master_exit_codes.append(code)
        self.tally.stop_seconds.append(round(stop_s, 2))
        done = {text(t) for t in self.conn.smembers(DONE_KEY)}
        runs = {text(k): int(v) for k, v in self.conn.hgetall(RUNS_KEY).items()}
        starts = {text(k): int(v) for k, v in self.conn.hgetall(STARTS_KEY).items()}
        dead = self.dead_tokens()
        expected = self.expected
        lost = sorted(expected - done - set(dead))
        # A token pushed twice (duplicates) runs twice without an extra run.
        pushed = Counter({self.jids[j]: n for j, n in self.copies.items()})
        extra_runs = sum(n - pushed.get(t, 1) for t, n in runs.items() if n > pushed.get(t, 1))
        # A job may run again only if it left a process's hands without its
        # outcome: in a child SIGKILLed (by us, or by a poison pill beside it:
        # the master's "requeued N"), in flight when Redis stopped or paused
        # (its recording failed), pushed back by a stop whose deadline passed
        # (a late job may have completed before it was pushed back), or held
        # by a child stopped past its heartbeat (recovered by a sibling, while
        # the stopped one goes on running it). The broadcast signals add
        # nothing: no child may die of one or rerun a job for it.
        tally = self.tally
        allowance = (
            tally.inflight_at_kills
            + tally.inflight_at_redis_stops
            + tally.pushed_back_at_deadlines
            + tally.inflight_at_stopped_children
            + tally.requeued_at_poison_crashes
            + tally.pushed_back_at_recycle_stops
        )
        end_scan = self.scan("at the end", every_job=True)
        bad_scans = [s for s in tally.scans if s["violations"]]
        late_pushed, late_recorded = self.late_outcomes()
        refused = self.refused_tokens()
        innocent_dead = sorted(set(dead) - set(tally.pills) - refused)
        forged_lost = sorted(set(tally.forged) - done - refused)
        twins_short = sorted(t for t in tally.twins if runs.get(t, 0) < 2)
        pills_alive = sorted(set(tally.pills) - set(dead))
        log = self.log()
        broadcast_deaths = sorted({f"pid {m[0]}: {m[1]}" for m in KILLED_BY_BROADCAST.findall(log)})
        broadcast_reruns = sorted(t for t in tally.broadcast_fuel if starts.get(t, 0) > 1)
        slow = [s for s in tally.pause_replaced_s if s is None or s > REPLACED_WITHIN_S]
        broadcast_ok = not broadcast_deaths and not broadcast_reruns
        figures = {
            "enqueued": len(expected),
            "done": len(done & expected),
            "lost": len(lost),
            "lost_sample": lost[:10],
            "run_more_than_once": sum(1 for n in runs.values() if n > 1),
            "extra_runs": extra_runs,
            "duplicate_allowance": allowance,
            "dead": len(dead),
            "poison_pills": len(tally.pills),
            "innocent_dead": len(innocent_dead),
            "innocent_dead_sample": innocent_dead[:10],
            "innocents_counted_a_crash": tally.innocents_blamed,
            "forged_queue_jobs": len(tally.forged),
            "forged_queue_jobs_refused_to_dead": len(set(tally.forged) & refused),
            "forged_queue_jobs_lost": len(forged_lost),
            "duplicated_pushes": len(tally.twins),
            "duplicated_copies_not_run": len(twins_short),
            "duplicated_copies_stranded": tally.twins_stranded,
            "one_place_scans": len(tally.scans),
            "scans_with_violations": [s["at"] for s in bad_scans],
            "jids_in_two_places_at_end": end_scan["in_two_places"],
            "jids_finished_and_in_a_place_at_end": end_scan["finished_and_in_a_place"],
            "jids_finished_twice": end_scan["finished_twice"],
            "late_jobs_pushed_back": late_pushed,
            "late_outcomes_recorded": late_recorded,
            "seen_stopped": {str(pid): why for pid, why in tally.seen_stopped.items()},
            "children_killed_by_broadcast": broadcast_deaths,
            "broadcast_jobs_started_twice": len(broadcast_reruns),
            "replaced_during_redis_pause_s": tally.pause_replaced_s,
            "settled": settled,
            "seconds": round(seconds, 1),
            "jobs_per_second": round(len(done) / seconds, 1) if seconds else None,
            "log_errors": log.count(" ERROR "),
            "log_tracebacks": log.count("Traceback"),
        }
        checks = {
            "all jobs settled before the deadline": settled,
            "lost == 0": not lost,
            "extra runs <= jobs in flight at kills, Redis stops and pauses, deadline "
            "stops, stopped children and poison crashes": extra_runs <= allowance,
            "dead set = the poison pills (no innocent job dead, every pill dead)": not innocent_dead
            and not pills_alive,
            "every job of a forged queue done or dead with the reason": not forged_lost,
            "each copy of a duplicated push ran, none stranded in progress": not twins_short
            and not tally.twins_stranded,
            "no jid in two places, nor finished and in a place, nor finished twice "
            "(at each stop of the pool and at the end)": not bad_scans,
            "no late outcome recorded for a job pushed back at a stop": late_recorded == 0,
            "no process seen stopped (T) but those the bench stopped": not tally.seen_stopped,
            "no child died of a broadcast signal, nor started a job twice for one": broadcast_ok,
            f"a child killed in a Redis pause was replaced within {REPLACED_WITHIN_S:g}s": not slow,
            "every stop of the master exited 0": all(c == 0 for c in self.tally.master_exit_codes),
            # quiet: nothing completed while quiet; HUP: every child retired
            # stopped; TTIN/TTOU: one more, then one fewer; memory: recycled.
            "every disruption had its effect": not self.tally.missed,
            # A traceback in the log is a thread or process that died of a
            # bug of ours, even if no job was lost to it.
            "no traceback in the log": figures["log_tracebacks"] == 0,
        }
        return {
            "profile": {"name": self.args.profile, **asdict(self.profile)},
            "machine": machine_info(self.conn),
            "figures": figures,
            "disruptions": dict(self.tally.counts),
            "inflight_at_kills": self.tally.inflight_at_kills,
            "inflight_at_redis_stops": self.tally.inflight_at_redis_stops,
            "pushed_back_at_deadlines": self.tally.pushed_back_at_deadlines,
            "inflight_at_stopped_children": self.tally.inflight_at_stopped_children,
            "requeued_at_poison_crashes": self.tally.requeued_at_poison_crashes,
            "pushed_back_at_recycle_stops": self.tally.pushed_back_at_recycle_stops,
            "scans": self.tally.scans,
            "master_exit_codes": self.tally.master_exit_codes,
            "master_stop_seconds": self.tally.stop_seconds,
            "missed": self.tally.missed,
            "events": self.tally.events,
            "checks": checks,
            "ok": all(checks.values()),
        }

    def close(self) -> None:
        """Stop the master (the server is stopped after it, by private_redis)."""
        with contextlib.suppress(Exception):
            self.master.stop(timeout=SHUTDOWN_TIMEOUT + 20)


def process_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat (R, S, T...), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :][:1] if is_jobmaster(pid) else None


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    p, f, m = report["profile"], report["figures"], report["machine"]
    print(
        f"\nchaos, profile {p['name']}: {p['jobs']:,} jobs, {p['processes']} children x "
        f"{p['concurrency']} threads, jobs {p['job_ms']:g} ms on average; "
        f"python {m['python']}, redis {m['redis']}, {m['nproc']} CPUs",
        file=out,
    )
    rows = [
        ("enqueued", f["enqueued"]),
        ("done", f["done"]),
        ("lost", f["lost"]),
        ("run more than once", f"{f['run_more_than_once']} (allowed {f['duplicate_allowance']})"),
        ("dead", f"{f['dead']} ({f['poison_pills']} poison pills, {f['innocent_dead']} innocent)"),
        ("innocents counted a crash", f["innocents_counted_a_crash"]),
        (
            "forged queue",
            f"{f['forged_queue_jobs']} jobs, {f['forged_queue_jobs_refused_to_dead']} refused "
            f"to the dead set, {f['forged_queue_jobs_lost']} lost",
        ),
        (
            "duplicated pushes",
            f"{f['duplicated_pushes']} x 2, {f['duplicated_copies_not_run']} copies not run, "
            f"{f['duplicated_copies_stranded']} stranded",
        ),
        (
            "one-place scans",
            f"{f['one_place_scans']} ({len(f['scans_with_violations'])} with a violation)",
        ),
        ("  jids in two places (end)", f["jids_in_two_places_at_end"]),
        ("  finished twice", f["jids_finished_twice"]),
        (
            "late outcomes recorded",
            f"{f['late_outcomes_recorded']} ({f['late_jobs_pushed_back']} pushed back)",
        ),
        ("seen stopped (T)", len(f["seen_stopped"])),
        ("killed by a broadcast", len(f["children_killed_by_broadcast"])),
        ("broadcast jobs run twice", f["broadcast_jobs_started_twice"]),
        ("replaced in a Redis pause", f["replaced_during_redis_pause_s"]),
        ("seconds", f["seconds"]),
        ("jobs/s under fire", f["jobs_per_second"]),
    ]
    rows += [(f"  {name}", count) for name, count in sorted(report["disruptions"].items())]
    rows.append(("master exit codes", report["master_exit_codes"]))
    for label, value in rows:
        print(f"  {label:<28}{value}", file=out)
    for check, passed in report["checks"].items():
        print(f"  {'ok  ' if passed else 'FAIL'} {check}", file=out)
    print("", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    parser.add_argument("--jobs", type=int, help="override the profile's job count")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--min-child-age", type=float, default=1.2, help="seconds (see above)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (master log)")
    parser.add_argument("--quiet", action="store_true", help="no line per disruption")
    args = parser.parse_args(argv)
    exit_on_term()
    profile = PROFILES[args.profile]
    if args.jobs:
        profile = Profile(**{**asdict(profile), "jobs": args.jobs})
    # Append-only, so the Redis restarts of the run keep every job.
    scratch = private_redis(appendonly=True, prefix="jobmaster-chaos-", keep=args.keep)
    with scratch as (tmp, server):
        chaos = Chaos(profile, tmp, server, args)
        try:
            chaos.start()
            settled = chaos.run()
            report = chaos.report(settled, time.monotonic() - chaos.started)
        except BaseException:
            print(f"chaos: master log tail:\n{log_tail(chaos.logfile, 60)}", file=sys.stderr)
            raise
        finally:
            chaos.close()
    return emit(report, print_table)


if __name__ == "__main__":
    sys.exit(main())
