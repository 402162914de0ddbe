"""Benchmark: how fast a producer enqueues, one job at a time and in bulk.

    .venv/bin/python bench/enqueue.py [--single 5000] [--bulk 100000] [--repeat 3]

Never run by pytest. A private ``redis-server`` on a free port (no
persistence; the shared Redis on 6379 is never touched); no worker runs.

- single: ``bench_jobs.noop.enqueue()`` in a loop from one thread, the way
  a web request enqueues: one round trip each (the push script, which also
  writes the job's status and publishes the wakeup).
- bulk: ``Client.push_bulk`` of ``--bulk`` jobs (1,000 per round trip).

Each is run ``--repeat`` times on an emptied server; the best and the median
run are reported (the best is the least disturbed by other load on a shared
machine). JSON on stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import bench_jobs
from harness import emit, exit_on_term, machine_info, private_redis

import jobmaster

JOB = "bench_jobs.noop"


def single(jobs: int) -> float:
    """jobs/s of ``enqueue()`` one after the other (the default client, configured)."""
    started = time.perf_counter()
    for _ in range(jobs):
        bench_jobs.noop.enqueue()
    return jobs / (time.perf_counter() - started)


def bulk(url: str, jobs: int) -> float:
    client = jobmaster.Client(url)
    arg_lists = [[] for _ in range(jobs)]
    started = time.perf_counter()
    client.push_bulk({"job": JOB, "args": arg_lists})
    return jobs / (time.perf_counter() - started)


def summary(rates: list[float]) -> dict[str, Any]:
    return {"best": max(rates), "median": statistics.median(rates), "runs": rates}


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    repeat = report["config"]["repeat"]
    print(f"\nenqueue, {repeat} runs each (jobs/s)      best     median", file=out)
    for label, key in (
        ("single enqueue()", "single_jobs_per_s"),
        ("push_bulk", "bulk_jobs_per_s"),
    ):
        s = report[key]
        print(f"  {label:<34}{s['best']:>8,.0f}{s['median']:>11,.0f}", file=out)
    print("", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--single", type=int, default=5_000, help="jobs enqueued one by one")
    parser.add_argument("--bulk", type=int, default=100_000, help="jobs in one push_bulk")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-table", action="store_true")
    args = parser.parse_args(argv)
    exit_on_term()
    with private_redis() as (_, server):
        conn = server.client()
        jobmaster.configure(redis_url=server.url)
        singles, bulks = [], []
        for _ in range(args.repeat):
            conn.flushall()
            singles.append(single(args.single))
            conn.flushall()
            bulks.append(bulk(server.url, args.bulk))
        report = {
            "machine": machine_info(conn),
            "config": vars(args),
            "single_jobs_per_s": summary(singles),
            "bulk_jobs_per_s": summary(bulks),
        }
    return emit(report, print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
