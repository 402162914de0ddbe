"""Benchmark: kill-to-requeue latency of the supervisor (SPEC §8: under 1 s).

This is a benchmark, not a test: it asserts nothing and is never run by pytest.

    cd /work/main && .venv/bin/python bench/failover.py [--kills 20] [--hold 30]
        [--min-age 0] [--no-table] [--keep-log]

What it does:

1. Starts a private ``redis-server`` on a free loopback port in a temporary
   directory (``jobmaster.embedded.RedisServerProcess``, no persistence). The
   shared Redis on 6379 is never touched: the master gets the private URL in
   its TOML *and* as ``--redis-url``, and every ``JOBMASTER_*`` /
   ``REDIS_URL`` variable is removed from its environment.
2. Starts the supervisor, ``jobmaster -c <tmp>/jobmaster.toml`` with
   ``processes = 2``, ``concurrency = 2``, ``shutdown_timeout = 5`` and
   ``app = ["bench_jobs"]`` (bench/ is put on PYTHONPATH), and waits until
   both children have a heartbeat.
3. ``--kills`` rounds, each with a fresh job (new jid, so ``crash_count``
   never reaches ``max_crashes``) and with nothing else in flight:

   - waits until the master has two children, each with a heartbeat and
     (``--min-age``) at least that many seconds old;
   - pushes ``bench_jobs.hold(token, --hold)``, which RPUSHes a start mark
     (its own ``time.time()``) to ``bench:failover:started:<token>`` and then
     sleeps in 20 ms steps until ``bench:failover:stop:<token>`` exists;
   - waits for the first start mark, finds the in-progress list
     ``jobmaster:{jobmaster}:inprogress:<host:pid:nonce>`` holding the payload,
     checks that the pid is a child of the master, takes
     ``t_kill = time.time()`` and SIGKILLs it;
   - polls every ~1 ms (one Lua call reads the queue and every in-progress
     list but the dead child's, pipelined with a read of the second start
     mark) and records:
       requeue latency = first poll that sees the payload in
       ``jobmaster:{jobmaster}:queue:default`` or in another child's
       in-progress list, minus t_kill (an upper bound: it includes one poll's
       round trip);
       restart latency = the job's own second start mark minus t_kill;
       replacement latency = first moment a new child pid of the master is
       seen in /proc. With the default ``--min-age 0`` the killed children
       are young, so the master's crash-loop backoff (0.1 s doubling to 30 s
       per slot, reset only by a child living 10 s) delays most
       replacements; ``--min-age 10`` avoids it at ~10 s per round;
   - checks the requeued payload (``crash_count``, ``crash_cause``), the
     master's log (``child N (pid P) died: SIGKILL ...; requeueing its jobs``,
     ``child N started (pid Q)``, any ``restarting in`` backoff line), then
     sets the stop key and waits until nothing is in flight.
4. Stops the master with SIGTERM (reporting how long it took and its exit
   code), stops the server and removes the temporary directory; all of it in
   ``finally`` blocks, so an error or Ctrl-C leaves no process behind.

Output: one JSON object with every figure and every round on stdout; a
readable table with the targets next to the figures on stderr (``--no-table``
to omit it). Targets: requeue and restart latency median < 500 ms, max <
1000 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from harness import (
    PREFIX,
    Master,
    emit,
    exit_on_term,
    log_tail,
    machine_info,
    private_redis,
    summary_ms,
    text,
    write_config,
)

import jobmaster

FAILOVER_PREFIX = "bench:failover:"  # same as bench_jobs.FAILOVER_PREFIX (no job registry here)
JOB_NAME = "bench_jobs.hold"
QUEUE_KEY = f"{PREFIX}queue:default"
INPROGRESS_PATTERN = f"{PREFIX}inprogress:*"
HEARTBEAT_PATTERN = f"{PREFIX}heartbeat:*"
PROCESSES = 2
CONCURRENCY = 2
SHUTDOWN_TIMEOUT = 5

POOL_DEADLINE = 90.0  # both children up (covers the crash-loop backoff, at most 30 s)
START_DEADLINE = 10.0  # the job's first start mark
MEASURE_DEADLINE = 10.0  # requeue and restart after the kill
DRAIN_DEADLINE = 10.0  # the job gone after its stop key
POLL_INTERVAL = 0.001

TARGET_MEDIAN_MS = 500.0
TARGET_MAX_MS = 1000.0

# Where is the payload holding ARGV[3]? The queue first, then every in-progress
# list except ARGV[2] (the dead child's). Returns {where, key, entry} or false.
# An empty token matches any entry: "is anything in flight?". KEYS is fine on
# the bench's private, nearly empty server.
FIND_SCRIPT = """
local queue, skip, token, pattern = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
for _, entry in ipairs(redis.call('LRANGE', queue, 0, -1)) do
  if string.find(entry, token, 1, true) then return {'queue', queue, entry} end
end
for _, key in ipairs(redis.call('KEYS', pattern)) do
  if key ~= skip then
    for _, entry in ipairs(redis.call('LRANGE', key, 0, -1)) do
      if string.find(entry, token, 1, true) then return {'inprogress', key, entry} end
    end
  end
end
return false
"""


class Pool:
    """What the bench knows about the master's children: when each was first seen."""

    def __init__(self, conn: redis.Redis, master: Master) -> None:
        self.conn = conn
        self.master = master
        self.first_seen: dict[int, float] = {}

    def children(self) -> set[int]:
        pids = self.master.children()
        now = time.monotonic()
        for pid in pids - self.first_seen.keys():
            self.first_seen[pid] = now
        return pids

    def heartbeat_pids(self) -> set[int]:
        pids: set[int] = set()
        for key in self.conn.scan_iter(match=HEARTBEAT_PATTERN, count=100):
            pid = self.conn.hget(key, "pid")
            if pid is not None:  # the master's own heartbeat is filtered out by the caller
                pids.add(int(pid))
        return pids

    def wait_ready(self, min_age: float) -> float:
        """Until PROCESSES live children have heartbeats and are min_age old; seconds waited."""
        started = time.monotonic()
        deadline = started + POOL_DEADLINE
        while time.monotonic() < deadline:
            if not self.master.alive():
                raise RuntimeError(
                    f"master exited with code {self.master.returncode()}; "
                    f"log tail:\n{log_tail(self.master.logfile)}"
                )
            alive = self.children()  # zombies excluded
            ready = alive & self.heartbeat_pids()
            now = time.monotonic()
            old = {p for p in ready if now - self.first_seen[p] >= min_age}
            if len(alive) == PROCESSES and len(old) == PROCESSES:
                return now - started
            time.sleep(0.02)
        raise RuntimeError(
            f"the pool never had {PROCESSES} ready children within {POOL_DEADLINE}s; "
            f"log tail:\n{log_tail(self.master.logfile)}"
        )


# -- one kill ----------------------------------------------------------------
class Finder:
    def __init__(self, conn: redis.Redis) -> None:
        self.script = conn.register_script(FIND_SCRIPT)

    def args(self, token: str, skip: str = "") -> list[str]:
        return [QUEUE_KEY, skip, token, INPROGRESS_PATTERN]

    def find(self, token: str, skip: str = "", client: Any = None) -> Any:
        return self.script(keys=[], args=self.args(token, skip), client=client)


def wait_for(check: Any, deadline_s: float, interval: float, what: str) -> Any:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise RuntimeError(f"timed out after {deadline_s}s waiting for {what}")


def start_job(
    index: int, conn: redis.Redis, client: jobmaster.Client, pool: Pool, hold: float
) -> dict[str, Any]:
    """Push a fresh job, wait for its start, find the child that runs it."""
    finder = Finder(conn)
    leftover = finder.find("")
    if leftover:
        raise RuntimeError(f"round {index}: something is still in flight: {leftover!r}")
    token = uuid.uuid4().hex
    started_key = f"{FAILOVER_PREFIX}started:{token}"
    t_push = time.time()
    jid = client.push({"job": JOB_NAME, "args": [token, hold]})
    first = json.loads(
        wait_for(lambda: conn.lindex(started_key, 0), START_DEADLINE, 0.002, "the job to start")
    )
    found = wait_for(lambda: finder.find(token), 2.0, 0.002, "the payload in a list")
    where, key = text(found[0]), text(found[1])
    if where != "inprogress":
        raise RuntimeError(f"round {index}: started job found in {key}, not an in-progress list")
    identity = key.removeprefix(f"{PREFIX}inprogress:")
    pid = int(identity.split(":")[-2])  # host:pid:nonce
    before = pool.children()
    if pid not in before or pid != first["pid"]:
        raise RuntimeError(
            f"round {index}: pid {pid} ({identity}) is not the master's running child"
        )
    return {
        "jid": jid,
        "token": token,
        "push_to_start_ms": (first["t"] - t_push) * 1000,
        "killed_pid": pid,
        "killed_identity": identity,
        "killed_child_age_s": time.monotonic() - pool.first_seen[pid],
        "inprogress_key": key,
        "children_before": before,
    }


def kill_and_measure(conn: redis.Redis, pool: Pool, job: dict[str, Any]) -> dict[str, Any]:
    """SIGKILL the child; poll until the job is requeued and has started again."""
    finder = Finder(conn)
    token, dead_key, before = job["token"], job["inprogress_key"], job["children_before"]
    started_key = f"{FAILOVER_PREFIX}started:{token}"
    requeue_at: float | None = None
    seen_in: list[str] = []
    payload: dict[str, Any] = {}
    restart: dict[str, Any] | None = None
    replacement: int | None = None
    replacement_at: float | None = None
    polls = 0

    t_kill = time.time()
    os.kill(job["killed_pid"], signal.SIGKILL)
    deadline = time.monotonic() + MEASURE_DEADLINE
    while time.monotonic() < deadline and (requeue_at is None or restart is None):
        pipe = conn.pipeline(transaction=False)
        finder.find(token, skip=dead_key, client=pipe)
        pipe.lindex(started_key, 1)
        seen, second = pipe.execute()
        now = time.time()
        polls += 1
        if requeue_at is None and seen:
            requeue_at = now
            seen_in = [text(seen[0]), text(seen[1])]
            payload = json.loads(seen[2])
        if restart is None and second is not None:
            restart = json.loads(second)
        if replacement is None and (new := pool.children() - before):
            replacement, replacement_at = min(new), time.time()
        time.sleep(POLL_INTERVAL)

    # The replacement child may come later (crash-loop backoff): slower polling.
    deadline = time.monotonic() + POOL_DEADLINE
    while replacement is None and time.monotonic() < deadline and pool.master.alive():
        if new := pool.children() - before:
            replacement, replacement_at = min(new), time.time()
        else:
            time.sleep(0.005)

    def ms(at: float | None) -> float | None:
        return None if at is None else (at - t_kill) * 1000

    return {
        "requeue_ms": ms(requeue_at),
        "requeue_seen_in": seen_in[0] if seen_in else None,
        "requeue_key": seen_in[1] if seen_in else None,
        "crash_count": payload.get("crash_count"),
        "crash_cause": payload.get("crash_cause"),
        "restart_ms": ms(restart["t"]) if restart else None,
        "restart_pid": restart["pid"] if restart else None,
        "replacement_ms": ms(replacement_at),
        "replacement_pid": replacement,
        "polls": polls,
    }


def finish_job(conn: redis.Redis, token: str) -> dict[str, Any]:
    """Stop the job, check how often it started, leave nothing in flight."""
    finder = Finder(conn)
    started_key = f"{FAILOVER_PREFIX}started:{token}"
    stop_key = f"{FAILOVER_PREFIX}stop:{token}"
    conn.set(stop_key, 1)
    drained = True
    try:
        wait_for(lambda: not finder.find(token), DRAIN_DEADLINE, 0.01, "the job to finish")
    except RuntimeError:
        drained = False
    starts = conn.llen(started_key)
    conn.delete(started_key, stop_key)
    return {"starts": starts, "drained": drained}


def log_checks(logfile: Path, pid: int, replacement: int | None) -> dict[str, Any]:
    """The master's lines about this kill: died, backoff, replacement started."""
    time.sleep(0.05)  # let the master's last line reach the file
    log = logfile.read_text(errors="replace")
    died = re.search(rf"child (\d+) \(pid {pid}\) died: (.*)", log)
    started = re.search(rf"child \d+ started \(pid {replacement}\)", log) if replacement else None
    backoff = None
    if died:
        backoff = re.search(
            rf"child {died.group(1)} died ([\d.]+)s after start: restarting in ([\d.]+)s",
            log[died.end() :],
        )
    return {
        "log_died": died.group(0).strip() if died else None,
        "log_died_sigkill": bool(died and died.group(2).startswith("SIGKILL")),
        "log_replacement_started": started is not None,
        "log_backoff_s": float(backoff.group(2)) if backoff else None,
    }


def one_kill(
    index: int, conn: redis.Redis, client: jobmaster.Client, pool: Pool, args: argparse.Namespace
) -> dict[str, Any]:
    pool_wait = pool.wait_ready(args.min_age)
    job = start_job(index, conn, client, pool, args.hold)
    measured = kill_and_measure(conn, pool, job)
    finished = finish_job(conn, job["token"])
    logged = log_checks(pool.master.logfile, job["killed_pid"], measured["replacement_pid"])
    job.pop("children_before")
    return {"round": index, "pool_wait_s": pool_wait, **job, **measured, **finished, **logged}


# -- report --------------------------------------------------------------------
def stats(values: list[float]) -> dict[str, Any]:
    """The summary, plus every value: a round's figure is worth a look."""
    return {**summary_ms(values), "values_ms": values} if values else summary_ms(values)


def verdict(value: float, target: float) -> str:
    return "ok" if value < target else "MISSED"


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    m = report["machine"]
    c = report["config"]
    print(
        f"\njobmaster {m['jobmaster']}  python {m['python']}  redis {m['redis']}  "
        f"nproc {m['nproc']}  processes {c['processes']} x concurrency {c['concurrency']}",
        file=out,
    )
    print(f"\nKill-to-requeue latency, {c['kills']} SIGKILLs of the child running a job", file=out)
    print(f"  {'':<22}{'median':>10}{'max':>10}   target (median / max)", file=out)
    for label, name, targeted in (
        ("requeue (back/queued)", "requeue", True),
        ("restart (runs again)", "restart", True),
        ("replacement forked", "replacement", False),
    ):
        s = report[name]
        if not s["n"]:
            print(f"  {label:<22}{'-':>10}{'-':>10}   (never seen)", file=out)
            continue
        target = ""
        if targeted:
            target = (
                f"< {TARGET_MEDIAN_MS:g} / < {TARGET_MAX_MS:g} ms  "
                f"{verdict(s['median_ms'], TARGET_MEDIAN_MS)}/{verdict(s['max_ms'], TARGET_MAX_MS)}"
            )
        print(f"  {label:<22}{s['median_ms']:10.1f}{s['max_ms']:10.1f}   {target}", file=out)
    print(f"\n  {'#':>3}{'requeue':>9}{'restart':>9}{'replace':>9}  seen in     notes", file=out)
    for r in report["rounds"]:
        notes = []
        if not r["log_died_sigkill"]:
            notes.append("no 'died: SIGKILL' log line")
        if not r["log_replacement_started"]:
            notes.append("no replacement log line")
        if r["log_backoff_s"]:
            notes.append(f"backoff {r['log_backoff_s']:g}s")
        if r["starts"] != 2:
            notes.append(f"{r['starts']} starts")
        if r["crash_count"] != 1:
            notes.append(f"crash_count {r['crash_count']}")
        if not r["drained"]:
            notes.append("not drained")

        def cell(v: float | None) -> str:
            return f"{v:9.1f}" if v is not None else f"{'-':>9}"

        print(
            f"  {r['round']:>3}{cell(r['requeue_ms'])}{cell(r['restart_ms'])}"
            f"{cell(r['replacement_ms'])}  {r['requeue_seen_in'] or '-':<11} {', '.join(notes)}",
            file=out,
        )
    chk = report["checks"]
    print(
        f"\n  log 'died: SIGKILL' {chk['log_died_sigkill']}/{c['kills']}, replacement "
        f"started {chk['log_replacement_started']}/{c['kills']}, crash_count==1 "
        f"{chk['crash_count_1']}/{c['kills']}, ran exactly twice {chk['ran_twice']}/{c['kills']}",
        file=out,
    )
    mm = report["master"]
    print(
        f"\nMaster: ready after {mm['startup_s']:.2f} s, SIGTERM to exit {mm['stop_s']:.2f} s "
        f"(code {mm['exit_code']}), log warnings/errors: {mm['log_warnings']}/{mm['log_errors']}\n",
        file=out,
    )


# -- main ----------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    with private_redis(keep=args.keep_log) as (tmp, server):
        url = server.url
        conn = server.client()
        machine = machine_info(conn)
        client = jobmaster.Client(url)
        config = write_config(
            tmp,
            url,
            app=["bench_jobs"],
            processes=PROCESSES,
            concurrency=CONCURRENCY,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
        )
        with Master(config, url, tmp / "master.log").running() as master:
            pool = Pool(conn, master)
            startup = pool.wait_ready(0.0)
            rounds = [one_kill(i + 1, conn, client, pool, args) for i in range(args.kills)]
            stop_s, code = master.stop()
            return report(args, machine, rounds, master, startup, stop_s, code)


def report(
    args: argparse.Namespace,
    machine: dict[str, Any],
    rounds: list[dict[str, Any]],
    master: Master,
    startup: float,
    stop_s: float,
    code: int | None,
) -> dict[str, Any]:
    logged = master.log_counts()
    # every kill logs one ERROR line ("child N (pid P) died: SIGKILL")
    kills_logged = sum(r["log_died"] is not None for r in rounds)

    def values(name: str) -> list[float]:
        return [r[f"{name}_ms"] for r in rounds if r[f"{name}_ms"] is not None]

    return {
        "machine": machine,
        "config": {
            "kills": args.kills,
            "processes": PROCESSES,
            "concurrency": CONCURRENCY,
            "shutdown_timeout": SHUTDOWN_TIMEOUT,
            "hold_s": args.hold,
            "min_age_s": args.min_age,
            "poll_interval_ms": POLL_INTERVAL * 1000,
        },
        "targets": {"median_ms": TARGET_MEDIAN_MS, "max_ms": TARGET_MAX_MS},
        "requeue": stats(values("requeue")),
        "restart": stats(values("restart")),
        "replacement": stats(values("replacement")),
        "checks": {
            "log_died_sigkill": sum(r["log_died_sigkill"] for r in rounds),
            "log_replacement_started": sum(r["log_replacement_started"] for r in rounds),
            "crash_count_1": sum(r["crash_count"] == 1 for r in rounds),
            "ran_twice": sum(r["starts"] == 2 for r in rounds),
            "backoffs_s": [r["log_backoff_s"] for r in rounds if r["log_backoff_s"]],
        },
        "rounds": rounds,
        "master": {
            "startup_s": startup,
            "stop_s": stop_s,
            "exit_code": code,
            **logged,
            "log_errors_beyond_kills": logged["log_errors"] - kills_logged,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kills", type=int, default=20, help="rounds (one SIGKILL each)")
    parser.add_argument("--hold", type=float, default=30.0, help="how long the job runs (s)")
    parser.add_argument(
        "--min-age",
        type=float,
        default=0.0,
        help="wait until both children are this old before a kill (10 avoids crash-loop backoff)",
    )
    parser.add_argument("--no-table", action="store_true", help="JSON on stdout only")
    parser.add_argument("--keep-log", action="store_true", help="keep the temp dir and log")
    args = parser.parse_args(argv)
    exit_on_term()
    return emit(run(args), print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
