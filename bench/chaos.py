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
  a job that pushes its child over ``max_child_mb``.

At the end it prints (a table on stderr, JSON on stdout) and checks: jobs
enqueued, done, **lost** (neither done nor dead: must be 0), run more than
once (at most the jobs in flight at the moments of kills and Redis stops,
which the run counts), dead (must be 0: no poison pills are injected),
seconds, each disruption's count, and the exit code of every stop of the
master. The exit status is 1 if any check fails.
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
JOB = "chaos_jobs.work"
DONE_KEY, RUNS_KEY, STARTS_KEY = "chaos:done", "chaos:runs", "chaos:starts"  # as chaos_jobs
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
SCHEDULE = (
    (0.08, "quiet"),
    (0.16, "term_restart"),
    (0.26, "hup"),
    (0.36, "ttin_ttou"),
    (0.46, "redis_restart"),
    (0.56, "kill_master"),
    (0.66, "memory"),
    (0.76, "term_restart"),
)

MAX_CHILD_MB = 120
BLOAT_MB = 200
SHUTDOWN_TIMEOUT = 10
REDIS_DOWN_S = 1.0
MAX_CRASHES = 20
BLOAT_QUEUE = "bloat"


@dataclass
class Tally:
    """What the run did, and how many jobs were in flight when it did it."""

    counts: Counter[str] = field(default_factory=Counter)
    inflight_at_kills: int = 0  # child and master SIGKILLs
    inflight_at_redis_stops: int = 0
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
        self.master: Master

    # -- setup -------------------------------------------------------------
    def start(self) -> None:
        self.conn = self.server.client(socket_timeout=10)
        self.inflight_script = self.conn.register_script(INFLIGHT_SCRIPT)
        config = write_config(
            self.tmp,
            self.server.url,
            app=["chaos_jobs"],
            processes=self.profile.processes,
            concurrency=self.profile.concurrency,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
            max_child_mb=MAX_CHILD_MB,
            memory_check_interval=1,
            memory_grace=5,
            poll_interval=0.5,
            # A child dies about once a second here, so a job may be in three
            # killed children by bad luck alone: that is not a poison pill
            # (tests/process/test_master.py proves max_crashes on its own).
            max_crashes=MAX_CRASHES,
            # The bloating job must not wait behind the whole backlog.
            queues=[BLOAT_QUEUE, "default"],
            strict=True,
        )
        self.master = Master(config, self.server.url, self.logfile)
        self.enqueue()
        self.master.start()
        self.master.wait_children(self.profile.processes)

    def enqueue(self) -> None:
        client = jobmaster.Client(self.server.url)
        mean = self.profile.job_ms
        payloads = [
            wire.build(JOB, [f"t{i}", round(self.rng.uniform(0, 2 * mean), 1)], {}, queue="default")
            for i in range(self.profile.jobs)
        ]
        client.push_payloads(payloads)
        self.total = len(payloads)

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
            os.kill(victim, signal.SIGSTOP)
            self.tally.inflight_at_kills += self.inflight(victim)
            os.kill(victim, signal.SIGKILL)
            self.tally.counts["child_sigkill"] += 1

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
        with self.no_kills():
            detail = getattr(self, f"do_{name}")()
        self.tally.counts[name] += 1
        if not detail.get("ok", True):
            self.tally.missed.append(name)
        self.tally.events.append({"event": name, "at_s": round(at, 2), "done": done, **detail})
        if not self.args.quiet:
            print(f"chaos: {at:7.2f}s  {done:>7} done  {name} {detail}", file=sys.stderr)

    def do_quiet(self) -> dict[str, Any]:
        self.master.signal(signal.SIGTSTP)
        # Each child says when it stopped fetching; only then is "nothing
        # completes once the in-progress lists are empty" a fair test (a
        # child still starting would otherwise fetch after the check).
        # Judged on the children alive at each look: one SIGKILLed just before
        # the TSTP may still show in /proc for a moment, and never says it.
        quieted = self.wait(lambda: self.master.children() <= self.quiet_pids(), 15)
        drained = quieted and self.wait(lambda: self.inflight() == 0, 15)
        before = self.done()
        held_until = time.monotonic() + 1.0
        while time.monotonic() < held_until:  # quiet must hold: nothing completes
            time.sleep(0.05)
        held = drained and self.done() == before
        self.master.signal(signal.SIGCONT)
        return {"quieted": quieted, "drained": drained, "ok": held}

    def quiet_pids(self) -> set[int]:
        found = re.findall(r"pid=(\d+) child=\d+: quiet: no new jobs", self.log())
        return {int(pid) for pid in found}

    def do_term_restart(self) -> dict[str, Any]:
        seconds, code = self.master.stop(timeout=SHUTDOWN_TIMEOUT + 20)
        self.tally.master_exit_codes.append(code)
        self.tally.stop_seconds.append(round(seconds, 2))
        self.master.start()
        self.master.wait_children(self.profile.processes)
        return {"stop_s": round(seconds, 2), "exit_code": code, "ok": code == 0}

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
        token = f"bloat{self.tally.counts['memory']}"
        jobmaster.Client(self.server.url).push_payloads(
            [wire.build(JOB, [token, 0, BLOAT_MB], {}, queue=BLOAT_QUEUE)]
        )
        self.total += 1
        pattern = re.compile(r"recycling it .*|over max_child_mb")
        seen_before = len(pattern.findall(self.log()))
        recycled = self.wait(lambda: len(pattern.findall(self.log())) > seen_before, 30)
        return {"ok": recycled}

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
        pipe.llen(KEYS.queue("default"))
        pipe.llen(KEYS.queue(BLOAT_QUEUE))
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
        self.kills_allowed.set()
        killer.start()
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

    # -- the verdict ----------------------------------------------------------------
    def dead_tokens(self) -> list[str]:
        tokens = []
        for raw in self.conn.zrange(KEYS.dead, 0, -1):
            with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
                tokens.append(str(json.loads(raw)["args"][0]))
        return tokens

    def report(self, settled: bool, seconds: float) -> dict[str, Any]:
        stop_s, code = self.master.stop(timeout=SHUTDOWN_TIMEOUT + 20)
        self.tally.master_exit_codes.append(code)
        self.tally.stop_seconds.append(round(stop_s, 2))
        done = {text(t) for t in self.conn.smembers(DONE_KEY)}
        runs = {text(k): int(v) for k, v in self.conn.hgetall(RUNS_KEY).items()}
        dead = self.dead_tokens()
        expected = {f"t{i}" for i in range(self.profile.jobs)}
        expected |= {f"bloat{i}" for i in range(self.tally.counts["memory"])}
        lost = sorted(expected - done - set(dead))
        extra_runs = sum(n - 1 for n in runs.values() if n > 1)
        allowance = self.tally.inflight_at_kills + self.tally.inflight_at_redis_stops
        log = self.log()
        figures = {
            "enqueued": len(expected),
            "done": len(done & expected),
            "lost": len(lost),
            "lost_sample": lost[:10],
            "run_more_than_once": sum(1 for n in runs.values() if n > 1),
            "extra_runs": extra_runs,
            "duplicate_allowance": allowance,
            "dead": len(dead),
            "settled": settled,
            "seconds": round(seconds, 1),
            "jobs_per_second": round(len(done) / seconds, 1) if seconds else None,
            "log_errors": log.count(" ERROR "),
            "log_tracebacks": log.count("Traceback"),
        }
        checks = {
            "all jobs settled before the deadline": settled,
            "lost == 0": not lost,
            "extra runs <= jobs in flight at kills and Redis stops": extra_runs <= allowance,
            "dead == 0 (no poison pills injected)": not dead,
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
        ("dead", f["dead"]),
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
