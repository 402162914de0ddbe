"""Benchmark: how fast a producer enqueues, one job at a time, from many threads, in bulk.

    .venv/bin/python bench/enqueue.py [--single 5000] [--threads 16] [--threaded 20000]
                                      [--bulk 100000] [--repeat 3]

Never run by pytest. A private ``redis-server`` on a free port (no
persistence; the shared Redis on 6379 is never touched); no worker runs.

- ping floor: a bare redis-py ``PING`` loop from one thread on the same
  server, in the same run: the round trip that a single enqueue cannot beat
  (the issue's target for ``enqueue()`` is >= 90 % of it).
- single: ``bench_jobs.noop.enqueue()`` in a loop from one thread, the way
  a web request enqueues: one round trip each.
- threads: ``--threads`` threads of one process each enqueueing its share
  of ``--threaded`` jobs at once (a web server under load), through the
  same default client.
- bulk: ``Client.push_bulk`` of ``--bulk`` jobs (1,000 per round trip).
- commands per job: INFO commandstats over a flood of ``--single`` single
  enqueues into one queue (Lua's own calls are counted by Redis too).

Each measure is run ``--repeat`` times, interleaved (ping, single, threads,
bulk, ping, ...), each on an emptied server; best and median are reported
(the best is the least disturbed by other load on a shared machine). JSON on
stdout, a table on stderr.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from typing import Any

import bench_jobs
import redis
from harness import call_counts, emit, exit_on_term, machine_info, private_redis

import jobmaster

JOB = "bench_jobs.noop"


def ping_floor(url: str, rounds: int) -> float:
    """PINGs/s of a bare redis-py client, one after the other."""
    conn = redis.Redis.from_url(url)
    conn.ping()  # connected before the clock starts, as the default client is
    started = time.perf_counter()
    for _ in range(rounds):
        conn.ping()
    rate = rounds / (time.perf_counter() - started)
    conn.close()
    return rate


def single(jobs: int) -> float:
    """jobs/s of ``enqueue()`` one after the other (the default client, configured)."""
    started = time.perf_counter()
    for _ in range(jobs):
        bench_jobs.noop.enqueue()
    return jobs / (time.perf_counter() - started)


def round_trips() -> int | None:
    """PUSH round trips of the default client so far (None: a checkout without pusher.py)."""
    pusher = getattr(jobmaster.client.default_client(), "pusher", None)
    return None if pusher is None else int(pusher.round_trips)


def threaded(threads: int, jobs: int, shared: list[float]) -> float:
    """jobs/s of ``threads`` threads enqueueing ``jobs`` in all, each one at a time;
    appends to ``shared`` the jobs per round trip, where the client counts them."""
    trips = round_trips()
    each = jobs // threads
    gate = threading.Barrier(threads + 1)

    def produce() -> None:
        gate.wait()
        for _ in range(each):
            bench_jobs.noop.enqueue()

    workers = [threading.Thread(target=produce) for _ in range(threads)]
    for worker in workers:
        worker.start()
    gate.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    rate = each * threads / (time.perf_counter() - started)
    after = round_trips()
    if trips is not None and after is not None and after > trips:
        shared.append(each * threads / (after - trips))
    return rate


def bulk(url: str, jobs: int) -> float:
    client = jobmaster.Client(url)
    arg_lists = [[] for _ in range(jobs)]
    started = time.perf_counter()
    client.push_bulk({"job": JOB, "args": arg_lists})
    return jobs / (time.perf_counter() - started)


def commands_per_job(conn: redis.Redis, jobs: int) -> dict[str, float]:
    """Redis calls per enqueued job, by command (INFO commandstats, Lua's calls included)."""
    conn.flushall()
    before = call_counts(conn)
    for _ in range(jobs):
        bench_jobs.noop.enqueue()
    after = call_counts(conn)
    # Our own INFO is the one call that is not the producer's.
    calls = {name: after[name] - before[name] for name in after if after[name] > before[name]}
    calls["info"] = calls.get("info", 1) - 1
    per_job = {name: round(count / jobs, 3) for name, count in sorted(calls.items()) if count}
    per_job["total"] = round(sum(calls.values()) / jobs, 3)
    return per_job


def summary(rates: list[float]) -> dict[str, Any]:
    return {"best": max(rates), "median": statistics.median(rates), "runs": rates}


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    repeat = report["config"]["repeat"]
    threads = report["config"]["threads"]
    print(f"\nenqueue, {repeat} runs each, interleaved (per s)   best     median", file=out)
    for label, key in (
        ("redis-py PING loop (floor)", "ping_per_s"),
        ("single enqueue()", "single_jobs_per_s"),
        (f"{threads} threads enqueue()", "threaded_jobs_per_s"),
        ("push_bulk", "bulk_jobs_per_s"),
    ):
        s = report[key]
        print(f"  {label:<40}{s['best']:>8,.0f}{s['median']:>11,.0f}", file=out)
    print(f"  single / PING, medians: {report['single_over_ping']:.2f}", file=out)
    if report["threaded_jobs_per_round_trip"] is not None:
        shared = report["threaded_jobs_per_round_trip"]
        print(f"  {threads} threads: {shared:.1f} jobs per round trip (median)", file=out)
    per_job = report["commands_per_job"]
    shown = ", ".join(f"{k} {v:g}" for k, v in per_job.items() if k != "total")
    print(f"  Redis commands per single enqueue: {per_job['total']:g} ({shown})\n", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--single", type=int, default=5_000, help="jobs enqueued one by one")
    parser.add_argument("--threads", type=int, default=16, help="producer threads")
    parser.add_argument("--threaded", type=int, default=20_000, help="jobs over all threads")
    parser.add_argument("--bulk", type=int, default=100_000, help="jobs in one push_bulk")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-table", action="store_true")
    args = parser.parse_args(argv)
    exit_on_term()
    with private_redis() as (_, server):
        conn = server.client()
        jobmaster.configure(redis_url=server.url)
        bench_jobs.noop.enqueue()  # the default client connected, its script loaded
        pings: list[float] = []
        singles: list[float] = []
        threads: list[float] = []
        bulks: list[float] = []
        per_trip: list[float] = []
        for _ in range(args.repeat):
            conn.flushall()
            pings.append(ping_floor(server.url, args.single))
            conn.flushall()
            singles.append(single(args.single))
            conn.flushall()
            threads.append(threaded(args.threads, args.threaded, per_trip))
            conn.flushall()
            bulks.append(bulk(server.url, args.bulk))
        report = {
            "machine": machine_info(conn),
            "config": vars(args),
            "ping_per_s": summary(pings),
            "single_jobs_per_s": summary(singles),
            "threaded_jobs_per_s": summary(threads),
            "bulk_jobs_per_s": summary(bulks),
            "single_over_ping": statistics.median(singles) / statistics.median(pings),
            "threaded_jobs_per_round_trip": statistics.median(per_trip) if per_trip else None,
            "commands_per_job": commands_per_job(conn, args.single),
        }
    return emit(report, print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
