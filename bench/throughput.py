"""Benchmark: no-op job throughput of ``jobmaster`` with 2 children, and Redis commands per job.

    .venv/bin/python bench/throughput.py [--jobs 50000] [--processes 2] [--concurrency 10]
        [--count-jobs 5000] [--no-status] [--log-level warning] [--no-table]

Never run by pytest. What it does:

1. Starts a private ``redis-server`` on a free port (no persistence, as the
   peers get in bench/peers.py; the shared Redis on 6379 is never touched).
2. Pushes ``--jobs`` ``bench_jobs.noop`` jobs with ``push_bulk`` (1,000 per
   round trip), then starts ``jobmaster -c`` with ``--processes`` children of
   ``--concurrency`` threads (status tracking on unless ``--no-status``).
3. Polls the ``processed`` counter (which the acknowledging script bumps)
   every 10 ms until it reaches ``--jobs``, and reports jobs/s from the
   master's start and from the first job done.
4. Redis commands per job: INFO commandstats before/after the timed run
   (this counts the commands Lua scripts run too, minus the bench's own
   polls), then a second, smaller run (``--count-jobs``) under MONITOR,
   which splits what clients send from what scripts run, for the push and
   for the processing separately. Commands sent are not round trips: the
   workers combine the fetches and acknowledgements of their threads, and
   ``total_reads_processed`` (INFO stats) counts the round trips themselves.

JSON on stdout; a readable table on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from harness import (
    Master,
    MonitorRecorder,
    call_counts,
    cpu_seconds,
    emit,
    exit_on_term,
    log_tail,
    machine_info,
    private_redis,
    write_config,
)

import jobmaster
from jobmaster.embedded import RedisServerProcess
from jobmaster.keys import Keys

KEYS = Keys("jobmaster")
JOB = "bench_jobs.noop"
POLL = 0.01
RUN_DEADLINE = 900.0


def push(url: str, jobs: int) -> float:
    """Push ``jobs`` no-op jobs; seconds taken."""
    client = jobmaster.Client(url)
    started = time.perf_counter()
    for start in range(0, jobs, 10_000):
        client.push_bulk({"job": JOB, "args": [[] for _ in range(min(10_000, jobs - start))]})
    return time.perf_counter() - started


def redis_cpu_seconds(conn: redis.Redis) -> float:
    info = conn.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def processed(conn: redis.Redis) -> int:
    return int(conn.get(KEYS.stat("processed")) or 0)


def run_master(
    tmp: Path, url: str, conn: redis.Redis, args: argparse.Namespace, jobs: int
) -> dict[str, Any]:
    """Start the master on a full queue; time it until every job is done."""
    config = write_config(
        tmp,
        url,
        app=["bench_jobs"],
        processes=args.processes,
        concurrency=args.concurrency,
        track_status=not args.no_status,
        log_level=args.log_level,
    )
    master = Master(config, url, tmp / "master.log")
    baseline = processed(conn)
    polls = 0
    first: float | None = None
    redis_cpu_before = redis_cpu_seconds(conn)
    reads_before = socket_reads(conn)
    started = time.perf_counter()
    master.start()
    try:
        deadline = time.monotonic() + RUN_DEADLINE
        while time.monotonic() < deadline:
            done = processed(conn) - baseline
            polls += 1
            if first is None and done > 0:
                first = time.perf_counter()
            if done >= jobs:
                break
            if not master.alive():
                raise RuntimeError(f"master exited\n{log_tail(master.logfile)}")
            time.sleep(POLL)
        else:
            raise RuntimeError(f"not done in {RUN_DEADLINE}s\n{log_tail(master.logfile)}")
        finished = time.perf_counter()
        children_cpu = sum(cpu_seconds(pid) for pid in master.children())
        master_cpu = cpu_seconds(master.pid)
        redis_cpu = redis_cpu_seconds(conn) - redis_cpu_before
        # Each poll of ours is one read; what is left are the workers' round trips.
        reads = socket_reads(conn) - reads_before - polls
    finally:
        stop_s, code = master.stop()
    total = finished - started
    from_first = finished - (first or started)
    return {
        "seconds_from_start": total,
        "seconds_from_first_job": from_first,
        "jobs_per_s_from_start": jobs / total,
        "jobs_per_s_from_first_job": jobs / from_first,
        "bench_polls": polls,
        "round_trips_per_job": reads / jobs,
        # Where the CPU goes, per job: the children (job system + redis-py),
        # the master, and Redis itself (which includes the bench's own polls).
        "children_cpu_us_per_job": children_cpu / jobs * 1e6,
        "master_cpu_us_per_job": master_cpu / jobs * 1e6,
        "redis_cpu_us_per_job": redis_cpu / jobs * 1e6,
        "stop_s": stop_s,
        "exit_code": code,
    }


def socket_reads(conn: redis.Redis) -> int:
    """Read events Redis processed on client sockets (INFO stats): one per round
    trip, since a pipeline's commands arrive together. Unlike MONITOR, which
    lists commands one by one, this sees combined fetches and acknowledgements
    as the single round trips they are."""
    return int(conn.info("stats")["total_reads_processed"])


def timed_run(tmp: Path, server: RedisServerProcess, args: argparse.Namespace) -> dict[str, Any]:
    conn = server.client()
    push_s = push(server.url, args.jobs)
    before = call_counts(conn)
    result = run_master(tmp, server.url, conn, args, args.jobs)
    diff = call_counts(conn) - before
    diff["get"] -= result["bench_polls"]
    diff = +diff  # drop what the subtraction emptied
    for name in ("info", "config"):  # the bench's own INFO commandstats
        diff.pop(name, None)
    return {
        "push_s": push_s,
        "push_jobs_per_s": args.jobs / push_s,
        **result,
        "commands_per_job_all": sum(diff.values()) / args.jobs,
        "commands_by_name_per_job": {k: v / args.jobs for k, v in diff.most_common()},
    }


def counted_run(tmp: Path, server: RedisServerProcess, args: argparse.Namespace) -> dict[str, Any]:
    """The same, smaller, under MONITOR: round trips vs. commands run by scripts."""
    conn = server.client()
    conn.flushall()
    jobs = args.count_jobs
    push_rec = MonitorRecorder(server.url, timeout=RUN_DEADLINE)
    push_rec.start_window(conn)
    push(server.url, jobs)
    push_rec.end_window(conn)

    work_rec = MonitorRecorder(server.url, timeout=RUN_DEADLINE)
    work_rec.start_window(conn)
    result = run_master(tmp, server.url, conn, args, jobs)
    work_rec.end_window(conn)
    work_client = Counter(work_rec.client)
    work_client["get"] -= result["bench_polls"]  # our own polls of the counter
    work_client = +work_client

    def per_job(counter: Counter[str]) -> dict[str, float]:
        return {k: round(v / jobs, 4) for k, v in counter.most_common()}

    enqueue_trips = sum(push_rec.client.values()) / jobs
    work_trips = sum(work_client.values()) / jobs
    return {
        "jobs": jobs,
        "monitor_ok": push_rec.complete and work_rec.complete,
        "enqueue_round_trips_per_job": enqueue_trips,
        "processing_round_trips_per_job": work_trips,
        "round_trips_per_job": enqueue_trips + work_trips,
        "processing_script_commands_per_job": sum(work_rec.script.values()) / jobs,
        "enqueue_client": per_job(push_rec.client),
        "processing_client": per_job(work_client),
        "processing_script": per_job(Counter(work_rec.script)),
    }


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    m, c, t, k = report["machine"], report["config"], report["timed"], report["counted"]
    print(
        f"\njobmaster {m['jobmaster']}, python {m['python']}, redis {m['redis']}, "
        f"{m['nproc']} CPUs; {c['jobs']:,} no-op jobs, {c['processes']} children x "
        f"{c['concurrency']} threads, status tracking {'off' if c['no_status'] else 'on'}, "
        f"log_level {c['log_level']}",
        file=out,
    )
    rows = [
        ("push_bulk (jobs/s)", f"{t['push_jobs_per_s']:,.0f}"),
        ("throughput from master start (jobs/s)", f"{t['jobs_per_s_from_start']:,.0f}"),
        ("throughput from first job (jobs/s)", f"{t['jobs_per_s_from_first_job']:,.0f}"),
        ("Redis commands per job, scripts' included", f"{t['commands_per_job_all']:.2f}"),
        ("commands sent per job: enqueue", f"{k['enqueue_round_trips_per_job']:.3f}"),
        (
            "commands sent per job: fetch + ack + stats",
            f"{k['processing_round_trips_per_job']:.3f}",
        ),
        ("commands sent per job: total (target <= 4)", f"{k['round_trips_per_job']:.3f}"),
        ("round trips per job while processing", f"{t['round_trips_per_job']:.3f}"),
        ("CPU per job: children (us)", f"{t['children_cpu_us_per_job']:.0f}"),
        ("CPU per job: master (us)", f"{t['master_cpu_us_per_job']:.1f}"),
        ("CPU per job: redis-server (us)", f"{t['redis_cpu_us_per_job']:.0f}"),
        ("TERM to exit after the run (s)", f"{t['stop_s']:.2f}"),
    ]
    for label, value in rows:
        print(f"  {label:<44}{value:>12}", file=out)
    print(f"  processing commands sent, by name: {k['processing_client']}", file=out)
    print(f"  commands run by scripts per job:   {k['processing_script']}\n", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--count-jobs", type=int, default=5_000, help="jobs of the MONITOR run")
    parser.add_argument("--no-status", action="store_true", help="track_status = false")
    parser.add_argument(
        "--log-level",
        default="warning",
        help="the workers' log_level: warning (no line per job) or info (the default "
        "setting: a start and an end line per job, written to the master's log file)",
    )
    parser.add_argument("--no-table", action="store_true")
    args = parser.parse_args(argv)
    exit_on_term()
    with private_redis() as (tmp, server):
        report = {
            "machine": machine_info(server.client()),
            "config": vars(args),
            "timed": timed_run(tmp, server, args),
            "counted": counted_run(tmp, server, args),
        }
    return emit(report, print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
