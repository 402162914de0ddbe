"""Benchmark: idle enqueue-to-start latency and idle Redis load of one worker process.

This is a benchmark, not a test: it asserts nothing and is never run by pytest.

    cd /work/main && .venv/bin/python bench/latency.py [--jobs 300] [--concurrency 10]
        [--idle-seconds 10] [--spacing 0.05] [--warmup 2] [--no-table]

What it does:

1. Starts a private ``redis-server`` on a free loopback port in a temporary
   directory (``jobmaster.embedded.RedisServerProcess``, no persistence). The
   shared Redis on 6379 is never touched: the worker gets the private URL in
   its TOML *and* as ``--redis-url`` (which outranks the environment), and
   every ``JOBMASTER_*`` / ``REDIS_URL`` variable is removed from its
   environment.
2. Measures what the measuring connection itself costs (the same INFO/ECHO
   sequence with no worker running), to subtract it later.
3. Starts ONE worker process, ``jobmaster -c <tmp>/jobmaster.toml`` (``run``,
   the default command) with ``processes = 1``, ``app = ["bench_jobs"]``
   (bench/ is put on PYTHONPATH) and ``concurrency`` threads, and waits (with
   a deadline) for its ``:heartbeat:`` key.
4. Idle load: after ``--warmup`` seconds, reads ``INFO commandstats`` before
   and after ``--idle-seconds`` of idleness. Calls/s = (sum of ``calls``
   after - before - own calls) / duration. Redis counts the commands a Lua
   script runs (LMOVE inside the FETCH script...) as calls too, so a
   ``MONITOR`` connection also records the window to split the calls into
   calls sent by clients (a MULTI pipeline counts each command)
   and calls made inside Lua scripts, per command.
5. Idle latency: ``--jobs`` times, with the worker idle, takes
   ``t = time.time()``, pushes ``bench_jobs.stamp(t)`` with
   ``jobmaster.Client(url).push``, waits (BLPOP) for the job's record of
   ``time.time() - t`` taken when its body started, then sleeps
   ``--spacing`` seconds so the worker is idle again before the next push.
   Percentiles are nearest-rank.
6. Stops the worker with SIGTERM (reporting how long it took to exit), stops
   the server and removes the temporary directory; all of it in ``finally``
   blocks, so an error or Ctrl-C leaves no process behind.

Output: one JSON object with every figure (plus nproc, Python, Redis and
redis-py versions) on stdout, so it can be piped or saved; a readable table
with the targets next to the figures on stderr (``--no-table`` to omit it).
Targets: idle latency median < 10 ms and p99 < 50 ms; idle calls/s per
worker process < 20.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from typing import Any

import redis
from harness import (
    Master,
    MonitorRecorder,
    call_counts,
    emit,
    exit_on_term,
    log_tail,
    machine_info,
    private_redis,
    write_config,
)

import jobmaster

RESULTS_KEY = "bench:latency"  # same as bench_jobs.RESULTS_KEY (not imported: no job registry)
JOB_NAME = "bench_jobs.stamp"
HEARTBEAT_DEADLINE = 30.0
RESULT_TIMEOUT = 5  # seconds BLPOP waits for one job's record before calling it lost

TARGET_MEDIAN_MS = 10.0
TARGET_P99_MS = 50.0
TARGET_IDLE_CALLS_PER_S = 20.0


# -- helpers -----------------------------------------------------------------
def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def idle_window(conn: redis.Redis, url: str, seconds: float) -> dict[str, Any]:
    """Calls counted by INFO commandstats over ``seconds``, plus the MONITOR split."""
    recorder = MonitorRecorder(url, timeout=seconds + 30)
    recorder.start_window(conn)
    before = call_counts(conn)
    t0 = time.monotonic()
    time.sleep(seconds)
    t1 = time.monotonic()
    recorder.end_window(conn)
    after = call_counts(conn)
    diff = after - before
    return {
        "duration": t1 - t0,
        "calls": dict(diff),
        "client": dict(recorder.client),
        "script": dict(recorder.script),
        "by_connection": dict(recorder.by_connection),
        "monitor_ok": recorder.complete and recorder.error is None,
        "monitor_error": recorder.error,
    }


# -- worker --------------------------------------------------------------------
def wait_for_heartbeat(conn: redis.Redis, worker: Master) -> float:
    started = time.monotonic()
    deadline = started + HEARTBEAT_DEADLINE
    while time.monotonic() < deadline:
        if not worker.alive():
            raise RuntimeError(
                f"worker exited with code {worker.returncode()} before its heartbeat; "
                f"log tail:\n{log_tail(worker.logfile)}"
            )
        if next(conn.scan_iter(match="*:heartbeat:*", count=100), None) is not None:
            return time.monotonic() - started
        time.sleep(0.05)
    raise RuntimeError(
        f"no worker heartbeat after {HEARTBEAT_DEADLINE}s; log:\n{log_tail(worker.logfile)}"
    )


# -- latency -------------------------------------------------------------------
def measure_latency(url: str, conn: redis.Redis, jobs: int, spacing: float) -> dict[str, Any]:
    client = jobmaster.Client(url)
    records: list[dict[str, Any]] = []
    lost = 0
    conn.delete(RESULTS_KEY)
    for index in range(jobs):
        t_enqueue = time.time()
        client.push({"job": JOB_NAME, "args": [t_enqueue]})
        reply = conn.blpop([RESULTS_KEY], timeout=RESULT_TIMEOUT)
        if reply is None:
            lost += 1
        else:
            record = json.loads(reply[1])
            record["index"] = index
            records.append(record)
        time.sleep(spacing)
    # A record that arrived after its BLPOP gave up would be read as the next job's.
    late = conn.llen(RESULTS_KEY)
    ms = sorted(r["latency"] * 1000 for r in records)
    slowest = sorted(records, key=lambda r: r["latency"], reverse=True)[:10]
    result: dict[str, Any] = {
        "jobs": jobs,
        "received": len(records),
        "lost": lost,
        "late_records": late,
        "spacing_ms": spacing * 1000,
    }
    if ms:
        result.update(
            {
                "min_ms": ms[0],
                "median_ms": percentile(ms, 50),
                "mean_ms": sum(ms) / len(ms),
                "p90_ms": percentile(ms, 90),
                "p99_ms": percentile(ms, 99),
                "max_ms": ms[-1],
                "over_10ms": sum(v > 10 for v in ms),
                "over_50ms": sum(v > 50 for v in ms),
                "over_500ms": sum(v > 500 for v in ms),
                "threads_used": len({r["thread"] for r in records}),
                "slowest": [
                    {"index": r["index"], "ms": r["latency"] * 1000, "thread": r["thread"]}
                    for r in slowest
                ],
            }
        )
    return result


# -- report --------------------------------------------------------------------
def idle_figures(window: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    calls = Counter(window["calls"])
    calls.subtract(own["calls"])
    calls = Counter({k: v for k, v in calls.items() if v > 0})
    duration = window["duration"]
    per_s = {k: v / duration for k, v in sorted(calls.items(), key=lambda kv: -kv[1])}
    figures: dict[str, Any] = {
        "seconds": duration,
        "calls_per_s": sum(calls.values()) / duration,
        "calls_per_s_by_command": per_s,
        "own_calls_subtracted": own["calls"],
    }
    if window["monitor_ok"]:
        client = Counter(window["client"])
        client.subtract(own["client"])
        client = Counter({k: v for k, v in client.items() if v > 0})
        figures["client_calls_per_s"] = sum(client.values()) / duration
        figures["client_calls_per_s_by_command"] = {
            k: v / duration for k, v in sorted(client.items(), key=lambda kv: -kv[1])
        }
        figures["script_internal_calls_per_s_by_command"] = {
            k: v / duration for k, v in sorted(window["script"].items(), key=lambda kv: -kv[1])
        }
    else:
        figures["monitor_error"] = window["monitor_error"] or "end marker not seen"
    return figures


def verdict(value: float, target: float) -> str:
    return "ok" if value < target else "MISSED"


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    m = report["machine"]
    print(
        f"\njobmaster {m['jobmaster']}  python {m['python']}  redis {m['redis']}  "
        f"nproc {m['nproc']}  concurrency {report['config']['concurrency']}",
        file=out,
    )
    lat = report["latency"]
    print(
        f"\nIdle enqueue-to-start latency ({lat['received']}/{lat['jobs']} jobs, "
        f"{lat['spacing_ms']:.0f} ms apart, lost {lat['lost']})",
        file=out,
    )
    if "median_ms" in lat:
        rows = [
            ("median", lat["median_ms"], f"< {TARGET_MEDIAN_MS:g} ms", TARGET_MEDIAN_MS),
            ("p90", lat["p90_ms"], "", None),
            ("p99", lat["p99_ms"], f"< {TARGET_P99_MS:g} ms", TARGET_P99_MS),
            ("max", lat["max_ms"], "", None),
        ]
        for label, value, target, limit in rows:
            mark = verdict(value, limit) if limit is not None else ""
            print(f"  {label:<8}{value:10.2f} ms   {target:<10} {mark}", file=out)
        print(
            f"  >10 ms: {lat['over_10ms']}  >50 ms: {lat['over_50ms']}  "
            f">500 ms: {lat['over_500ms']}  threads used: {lat['threads_used']}",
            file=out,
        )
    idle = report["idle"]
    rate = idle["calls_per_s"]
    print(
        f"\nIdle Redis calls over {idle['seconds']:.1f} s: {rate:.2f}/s   "
        f"target < {TARGET_IDLE_CALLS_PER_S:g}/s   {verdict(rate, TARGET_IDLE_CALLS_PER_S)}",
        file=out,
    )
    if "client_calls_per_s" in idle:
        print(f"  of which sent by clients (not Lua): {idle['client_calls_per_s']:.2f}/s", file=out)
    print(f"  {'command':<18}{'calls/s':>9}{'by clients/s':>15}", file=out)
    trips = idle.get("client_calls_per_s_by_command", {})
    for name, value in idle["calls_per_s_by_command"].items():
        print(f"  {name:<18}{value:9.2f}{trips.get(name, 0.0):15.2f}", file=out)
    w = report["worker"]
    print(
        f"\nWorker: heartbeat after {w['startup_s']:.2f} s, SIGTERM to exit "
        f"{w['stop_s']:.2f} s (code {w['exit_code']}), log warnings/errors: "
        f"{w['log_warnings']}/{w['log_errors']}\n",
        file=out,
    )


# -- main ----------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    with private_redis(keep=args.keep_log) as (tmp, server):
        url = server.url
        conn = server.client()
        machine = machine_info(conn)
        own = idle_window(conn, url, 0.0)  # what our own INFO/ECHO sequence costs

        config = write_config(
            tmp, url, app=["bench_jobs"], processes=1, concurrency=args.concurrency
        )
        with Master(config, url, tmp / "worker.log").running("worker") as worker:
            startup = wait_for_heartbeat(conn, worker)
            time.sleep(args.warmup)
            window = idle_window(conn, url, args.idle_seconds)
            latency = measure_latency(url, conn, args.jobs, args.spacing)
            stop_s, code = worker.stop()
        return {
            "machine": machine,
            "config": {
                "concurrency": args.concurrency,
                "jobs": args.jobs,
                "idle_seconds": args.idle_seconds,
                "spacing_s": args.spacing,
                "warmup_s": args.warmup,
            },
            "targets": {
                "latency_median_ms": TARGET_MEDIAN_MS,
                "latency_p99_ms": TARGET_P99_MS,
                "idle_calls_per_s": TARGET_IDLE_CALLS_PER_S,
            },
            "latency": latency,
            "idle": idle_figures(window, own),
            "worker": {
                "startup_s": startup,
                "stop_s": stop_s,
                "exit_code": code,
                **worker.log_counts(),
            },
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=300, help="jobs for the latency run")
    parser.add_argument("--concurrency", type=int, default=10, help="worker threads")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle window")
    parser.add_argument("--spacing", type=float, default=0.05, help="idle gap between jobs (s)")
    parser.add_argument("--warmup", type=float, default=2.0, help="wait after heartbeat (s)")
    parser.add_argument("--no-table", action="store_true", help="JSON on stdout only")
    parser.add_argument("--keep-log", action="store_true", help="keep the temp dir and log")
    args = parser.parse_args(argv)
    exit_on_term()
    return emit(run(args), print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
