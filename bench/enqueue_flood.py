"""Benchmark: Redis commands per job while producers flood a running worker.

    .venv/bin/python bench/enqueue_flood.py [--jobs 5000] [--producers 4]
        [--processes 1] [--concurrency 4] [--repeat 3]

Never run by pytest. A private ``redis-server`` on a free port; a real
``jobmaster -c`` master whose children are subscribed to their wakeup
channel (idle) before the flood begins; then ``--producers`` threads of this
process enqueue ``--jobs`` ``bench_jobs.noop`` jobs one at a time while the
worker drains them, until the ``processed`` counter has them all.

What it counts: INFO commandstats over the flood (Lua's own calls included;
the bench's own polls and INFO taken out), per job, by command; above all
the wakeup PUBLISHes, which each push made before and which now only the
push into an empty queue makes, and the FETCHes a wakeup sends for nothing.
The worker side runs this checkout's code; what differs between two
checkouts is the producer's push. JSON on stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import bench_jobs
import redis
from harness import (
    Master,
    call_counts,
    emit,
    exit_on_term,
    log_tail,
    machine_info,
    private_redis,
    write_config,
)

import jobmaster
from jobmaster.keys import Keys

KEYS = Keys("jobmaster")
POLL = 0.01
DEADLINE = 600.0


def flood(conn: redis.Redis, args: argparse.Namespace, master: Master) -> dict[str, Any]:
    """One flood into the idle worker; its calls per job and its rate."""
    channel = KEYS.wakeup_channel("default")
    deadline = time.monotonic() + 60
    while conn.pubsub_numsub(channel)[0][1] < args.processes:  # every child listening
        if time.monotonic() > deadline:
            raise RuntimeError(f"children never subscribed\n{log_tail(master.logfile)}")
        time.sleep(POLL)
    baseline = int(conn.get(KEYS.stat("processed")) or 0)
    each = args.jobs // args.producers
    jobs = each * args.producers
    before = call_counts(conn)
    polls = 0

    def produce() -> None:
        for _ in range(each):
            bench_jobs.noop.enqueue()

    started = time.perf_counter()
    producers = [threading.Thread(target=produce) for _ in range(args.producers)]
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join()
    pushed = time.perf_counter()
    end = time.monotonic() + DEADLINE
    while int(conn.get(KEYS.stat("processed")) or 0) - baseline < jobs:
        polls += 1
        if time.monotonic() > end or not master.alive():
            raise RuntimeError(f"the flood was not drained\n{log_tail(master.logfile)}")
        time.sleep(POLL)
    drained = time.perf_counter()
    diff = call_counts(conn) - before
    diff["get"] -= polls + 1
    diff["info"] -= 1
    diff = +diff  # drop what the subtraction emptied
    return {
        "jobs": jobs,
        "push_jobs_per_s": jobs / (pushed - started),
        "drain_s": drained - started,
        "commands_per_job": sum(diff.values()) / jobs,
        "by_command": {name: count / jobs for name, count in sorted(diff.items())},
    }


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    runs = report["runs"]
    print(f"\nflood of single enqueues into a running worker, {len(runs)} runs", file=out)
    print(f"  commands per job (median): {report['commands_per_job_median']:.2f}", file=out)
    names = sorted({name for run in runs for name in run["by_command"]})
    for name in names:
        values = [run["by_command"].get(name, 0.0) for run in runs]
        print(f"    {name:<10}" + "".join(f"{v:>8.3f}" for v in values), file=out)
    rates = ", ".join(f"{run['push_jobs_per_s']:,.0f}" for run in runs)
    print(f"  push rate during the flood (jobs/s): {rates}\n", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--producers", type=int, default=4, help="producer threads")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-table", action="store_true")
    args = parser.parse_args(argv)
    exit_on_term()
    with private_redis() as (tmp, server):
        conn = server.client()
        jobmaster.configure(redis_url=server.url)
        config = write_config(
            Path(tmp),
            server.url,
            app=["bench_jobs"],
            processes=args.processes,
            concurrency=args.concurrency,
            log_level="warning",
        )
        master = Master(config, server.url, Path(tmp) / "master.log")
        master.start()
        try:
            master.wait_children(args.processes)
            runs = [flood(conn, args, master) for _ in range(args.repeat)]
        finally:
            master.stop()
        report = {
            "machine": machine_info(conn),
            "config": vars(args),
            "runs": runs,
            "commands_per_job_median": statistics.median(r["commands_per_job"] for r in runs),
        }
    return emit(report, print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
