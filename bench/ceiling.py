"""Benchmark: the bare-Redis ceiling of reliable fetch on this machine.

    .venv/bin/python bench/ceiling.py [--jobs 50000] [--batch 50] [--processes 2]

Never run by pytest. No job system at all: ``--processes`` forked processes
(2, like the throughput bench's children) each do only the Redis work that
reliable fetch needs per job, with redis-py, against a private
``redis-server`` (no persistence; the shared one on 6379 is never touched):

- unbatched: ``LMOVE queue -> own in-progress list`` (one round trip), then
  ``LREM`` it plus ``INCR processed`` (one pipelined round trip): two round
  trips a job, as a worker that fetches one job and acknowledges it.
- batched: ``--batch`` LMOVEs in one pipeline, then their LREMs and one
  ``INCRBY`` in another: two round trips per ``--batch`` jobs.

The entries are real jobmaster payloads of a no-op job, so the bytes moved
are the same. jobs/s = ``--jobs`` / wall time until both processes are done.
What jobmaster reaches in bench/throughput.py, divided by this, is how
close the job system comes to what Redis allows here. JSON on stdout, a
table on stderr.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from typing import Any

import redis
from harness import emit, exit_on_term, machine_info, private_redis

from jobmaster import payload as wire

QUEUE = "ceiling:queue"
PROCESSED = "ceiling:processed"


def fill(conn: redis.Redis, jobs: int) -> None:
    pipe = conn.pipeline(transaction=False)
    for start in range(0, jobs, 1000):
        entries = [
            wire.encode(wire.build("bench_jobs.noop", [], {}, queue="default"))
            for _ in range(min(1000, jobs - start))
        ]
        pipe.lpush(QUEUE, *entries)
    pipe.execute()


def unbatched(url: str, index: int) -> None:
    conn = redis.Redis.from_url(url)
    mine = f"ceiling:inprogress:{index}"
    while (entry := conn.lmove(QUEUE, mine, "RIGHT", "LEFT")) is not None:
        pipe = conn.pipeline(transaction=False)
        pipe.lrem(mine, -1, entry)
        pipe.incr(PROCESSED)
        pipe.execute()


def batched(url: str, index: int, batch: int) -> None:
    conn = redis.Redis.from_url(url)
    mine = f"ceiling:inprogress:{index}"
    while True:
        fetch = conn.pipeline(transaction=False)
        for _ in range(batch):
            fetch.lmove(QUEUE, mine, "RIGHT", "LEFT")
        entries = [e for e in fetch.execute() if e is not None]
        if not entries:
            return
        ack = conn.pipeline(transaction=False)
        for entry in entries:
            ack.lrem(mine, -1, entry)
        ack.incrby(PROCESSED, len(entries))
        ack.execute()


def run(url: str, conn: redis.Redis, jobs: int, processes: int, batch: int) -> dict[str, Any]:
    conn.flushall()
    fill(conn, jobs)
    context = multiprocessing.get_context("fork")
    if batch > 1:
        workers = [context.Process(target=batched, args=(url, i, batch)) for i in range(processes)]
    else:
        workers = [context.Process(target=unbatched, args=(url, i)) for i in range(processes)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=600)
    seconds = time.perf_counter() - started
    done = int(conn.get(PROCESSED) or 0)
    return {"jobs": done, "seconds": seconds, "jobs_per_s": done / seconds, "batch": batch}


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    processes = report["config"]["processes"]
    print(f"\nreliable-fetch ceiling, {processes} processes, bare redis-py", file=out)
    for name in ("unbatched", "batched"):
        r = report[name]
        print(f"  {name:<10} batch {r['batch']:>3}  {r['jobs_per_s']:>10,.0f} jobs/s", file=out)
    print("", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--no-table", action="store_true")
    args = parser.parse_args(argv)
    exit_on_term()
    with private_redis() as (_, server):
        conn = server.client()
        report = {
            "machine": machine_info(conn),
            "config": vars(args),
            "unbatched": run(server.url, conn, args.jobs, args.processes, 1),
            "batched": run(server.url, conn, args.jobs, args.processes, args.batch),
        }
    return emit(report, print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
