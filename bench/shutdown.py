"""Benchmark: SIGTERM to exit, with idle children and with jobs running.

    .venv/bin/python bench/shutdown.py [--rounds 5] [--hold 5]

Never run by pytest. A private ``redis-server`` (the shared one on 6379 is
never touched) and ``jobmaster -c`` with 2 children x 5 threads and the
default ``shutdown_timeout`` (25 s):

- idle: wait until both children are up, SIGTERM the master, time until it
  has exited (target: under 1 s);
- busy: 2 ``bench_jobs.hold`` jobs of ``--hold`` seconds started (their start
  marks seen), SIGTERM, time to exit, and where the jobs went: completed
  (each marks its end), pushed back to the queue, or lost (neither).

JSON on stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from harness import Master, emit, exit_on_term, machine_info, private_redis, write_config

import jobmaster
from jobmaster.keys import Keys

KEYS = Keys("jobmaster")
FAILOVER_PREFIX = "bench:failover:"  # bench_jobs.hold's marks
TARGET_IDLE_S = 1.0


def wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.01)
    raise RuntimeError(f"timed out waiting for {what}")


def heartbeats(conn: redis.Redis) -> int:
    return sum(1 for _ in conn.scan_iter(match=KEYS.heartbeat("*"), count=100))


def one_round(tmp: Path, url: str, conn: redis.Redis, busy: bool, hold: float) -> dict[str, Any]:
    conn.flushall()
    config = write_config(tmp, url, app=["bench_jobs"], processes=2, concurrency=5)
    with Master(config, url, tmp / "master.log").running() as master:
        master.wait_children(2)
        wait(lambda: heartbeats(conn) >= 3, 30, "the master's and both children's heartbeats")
        tokens = []
        if busy:
            client = jobmaster.Client(url)
            tokens = [uuid.uuid4().hex for _ in range(2)]
            for token in tokens:
                client.push({"job": "bench_jobs.hold", "args": [token, hold]})
            started = [f"{FAILOVER_PREFIX}started:{t}" for t in tokens]
            wait(lambda: all(conn.llen(k) for k in started), 30, "both jobs to start")
        t0 = time.monotonic()
        master.signal(signal.SIGTERM)
        code = master.wait_exit(60)
        seconds = time.monotonic() - t0
    queued = conn.lrange(KEYS.queue("default"), 0, -1)
    completed = int(conn.get(KEYS.stat("processed")) or 0)
    pushed_back = sum(any(t.encode() in entry for entry in queued) for t in tokens)
    return {
        "seconds": seconds,
        "exit_code": code,
        "jobs": len(tokens),
        "completed": completed,
        "pushed_back": pushed_back,
        "lost": len(tokens) - completed - pushed_back,
    }


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    c = report["config"]
    print(f"\nSIGTERM to exit, {c['rounds']} rounds, 2 children x 5 threads", file=out)
    print(
        f"  idle: median {report['idle_median_s']:.2f} s, max {report['idle_max_s']:.2f} s"
        f" (target < {TARGET_IDLE_S:g} s)",
        file=out,
    )
    b = report["busy"]
    print(
        f"  2 jobs of {c['hold']:g} s running: median {report['busy_median_s']:.2f} s, "
        f"completed {sum(r['completed'] for r in b)}, pushed back "
        f"{sum(r['pushed_back'] for r in b)}, lost {sum(r['lost'] for r in b)}",
        file=out,
    )
    codes = sorted({r["exit_code"] for r in report["idle"] + b}, key=str)
    print(f"  exit codes: {codes}\n", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hold", type=float, default=5.0, help="seconds each busy job runs")
    parser.add_argument("--no-table", action="store_true")
    args = parser.parse_args(argv)
    exit_on_term()
    with private_redis() as (tmp, server):
        conn = server.client()
        idle = [one_round(tmp, server.url, conn, False, args.hold) for _ in range(args.rounds)]
        busy = [one_round(tmp, server.url, conn, True, args.hold) for _ in range(args.rounds)]
        report = {"machine": machine_info(conn), "config": vars(args), "idle": idle, "busy": busy}
    for name in ("idle", "busy"):
        times = [r["seconds"] for r in report[name]]
        report[f"{name}_median_s"] = statistics.median(times)
        report[f"{name}_max_s"] = max(times)
    return emit(report, print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
