"""Benchmark: what job status tracking (``track_status``) and keeping results cost.

This is a benchmark, not a test: it asserts nothing and is never run by pytest.

    cd /work/main && .venv/bin/python bench/status_cost.py [--jobs 20000] [--runs 3]
        [--processes 2] [--concurrency 8] [--results] [--no-table] [--keep-log]

With ``track_status = true`` (the default) every job's status key is SET
inside the PUSH (``queued``, when the producer's ``status_ttl`` > 0), FETCH
(``working``) and FINISH (``done``...) Lua scripts, and FINISH also RPUSHes
the attempt to the job's attempts history and EXPIREs it. This bench measures
what that costs, with and without it.

What it does:

1. Starts a private ``redis-server`` on a free loopback port in a temporary
   directory (``jobmaster.embedded.RedisServerProcess``, no persistence). The
   shared Redis on 6379 is never touched: the master gets the private URL in
   its TOML *and* as ``--redis-url``, and every ``JOBMASTER_*`` /
   ``REDIS_URL`` variable is removed from its environment.
2. ``--runs`` runs per mode, alternating ``track_status`` true, false, true,
   false... (so a drift of the machine hits both modes alike). Each run:

   - FLUSHALL of the private server, then a baseline ``used_memory``;
   - enqueue: ``jobmaster.Client(url, status_ttl=86400 or 0).push_bulk`` of
     ``--jobs`` ``bench_jobs.noop`` jobs (one PUSH script per 1,000 jobs),
     timed (enqueue jobs/s) between two ``INFO commandstats`` (Redis calls
     per job enqueued);
   - starts the supervisor, ``jobmaster -c <tmp>/<run>/jobmaster.toml`` with
     ``processes``, ``concurrency``, ``track_status`` and ``app =
     ["bench_jobs"]`` (bench/ is put on PYTHONPATH), and from then on polls
     ``jobmaster:{jobmaster}:stat:processed`` (one GET) every ~20 ms. The
     counter is INCRed by FINISH, so its first value > 0 marks (within one
     poll) the first job finished, close to the first started;
   - throughput: ``(N - first value seen) / (t at N - t of that first value)``
     ("first to last"), and ``N / (t at N - t at Popen)`` ("from master
     start", which includes interpreter start-up, the fork of the children,
     their connection and the app import);
   - Redis calls per job processed: ``INFO commandstats`` just before the
     Popen and when the counter reaches N, minus the bench's own calls (the
     GET polls and the first INFO). Redis counts every command a Lua script
     runs as a call too (EVALSHA FINISH is 1 call + LREM, INCR... inside), so
     the figure is "commands Redis executed", split per command in the JSON;
     it also includes the master's and children's start-up and heartbeat
     calls over the window, which is small next to N jobs;
   - stops the master with SIGTERM and waits for it (any child still alive
     afterwards is SIGKILLed and reported), then reads ``used_memory``,
     ``DBSIZE`` and, with tracking, ``MEMORY USAGE`` of one status key and
     one attempts list: (used_memory after - baseline) per 1,000 finished
     jobs kept is the memory the finished jobs leave behind (for
     ``status_ttl`` seconds, a day by default).
3. Stops the server and removes the temporary directory; all of it in
   ``finally`` blocks, so an error or Ctrl-C leaves no process behind.

With ``--results`` a third mode joins each round: tracking on, and the job
(``bench_jobs.answer``) returns a small dict, so that FINISH also SETs its
``result:<jid>`` key (``noop`` returns None, which stores nothing). Its cost
is reported against the "on" runs: throughput lost by returning a value,
and the Redis memory 1,000 kept results take (``MEMORY USAGE`` of one result
key too). Every ended job is also PUBLISHed on its ``ended:<jid>`` channel
when tracking is on: that is in "on" already (a PUBLISH nobody listens to).

Reported per mode: the median of the runs' jobs/s (processing, both
windows, and enqueue), and the cost of tracking as a percentage:
``(median off - median on) / median off``, i.e. the throughput lost by
turning tracking on. On a small machine the master, the children, Redis and
this bench share the CPUs, so run-to-run noise of several % is normal: look
at the individual runs next to the medians.

Output: one JSON object with every figure and every run on stdout; a
readable table on stderr (``--no-table`` to omit it).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import redis
from harness import (
    PREFIX,
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

JOB_NAME = "bench_jobs.noop"
RESULT_JOB_NAME = "bench_jobs.answer"
MODES = ("on", "off", "results")  # track_status on; off; on with a return value
PROCESSED_KEY = f"{PREFIX}stat:processed"
STATUS_PATTERN = f"{PREFIX}status:*"
ATTEMPTS_PATTERN = f"{PREFIX}attempts:*"
RESULT_PATTERN = f"{PREFIX}result:*"
STATUS_TTL = 86400
SHUTDOWN_TIMEOUT = 5
POLL_INTERVAL = 0.02

RUN_DEADLINE = 300.0  # every job processed


# -- helpers -----------------------------------------------------------------
def used_memory(conn: redis.Redis) -> int:
    return int(conn.info("memory")["used_memory"])


def per_job(diff: Counter[str], jobs: int) -> dict[str, float]:
    return {k: v / jobs for k, v in sorted(diff.items(), key=lambda kv: (-kv[1], kv[0])) if v}


# -- one run -------------------------------------------------------------------
def enqueue(
    url: str, conn: redis.Redis, jobs: int, track_status: bool, job: str = JOB_NAME
) -> dict[str, Any]:
    client = jobmaster.Client(url, status_ttl=STATUS_TTL if track_status else 0)
    args: list[list[Any]] = [[] for _ in range(jobs)]
    client.redis.ping()  # connect (and pay for it) before the clock starts
    before = call_counts(conn)
    started = time.perf_counter()
    jids = client.push_bulk({"job": job, "args": args})
    elapsed = time.perf_counter() - started
    after = call_counts(conn)
    with contextlib.suppress(Exception):
        client.redis.close()
    diff = after - before
    diff["info"] -= 1  # the "before" INFO is counted in "after"
    diff = +diff
    queued = int(conn.llen(f"{PREFIX}queue:default"))
    return {
        "jobs": jobs,
        "pushed": len(jids),
        "queued": queued,
        "seconds": elapsed,
        "jobs_per_s": jobs / elapsed,
        "redis_calls_per_job": sum(diff.values()) / jobs,
        "redis_calls_per_job_by_command": per_job(diff, jobs),
    }


def redis_cpu(conn: redis.Redis) -> float:
    """Seconds of CPU the Redis server has used (user + system)."""
    cpu = conn.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def children_cpu(pids: set[int]) -> float:
    """Seconds of CPU the live worker children have used (user + system)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


def process(
    conn: redis.Redis,
    master: Master,
    jobs: int,
    t_popen: float,
    before: Counter[str],
    cpu_before: float,
) -> dict[str, Any]:
    """Poll stat:processed until it reaches ``jobs``; the timings, Redis calls and
    CPU. CPU is what a busy shared machine distorts least: wall-clock rates
    swing with other loads, the CPU a job costs much less."""
    polls = 0
    t_first: float | None = None
    first_value = 0
    value = 0
    deadline = t_popen + RUN_DEADLINE
    while True:
        raw = conn.get(PROCESSED_KEY)
        now = time.perf_counter()
        polls += 1
        value = int(raw or 0)
        if value > 0 and t_first is None:
            t_first, first_value = now, value
        if value >= jobs:
            break
        if now > deadline:
            raise RuntimeError(
                f"only {value}/{jobs} jobs processed in {RUN_DEADLINE}s; "
                f"log tail:\n{log_tail(master.logfile)}"
            )
        if not master.alive():
            raise RuntimeError(
                f"master exited with code {master.returncode()} at {value}/{jobs} jobs; "
                f"log tail:\n{log_tail(master.logfile)}"
            )
        master.children()  # noted, to clean up after
        time.sleep(POLL_INTERVAL)
    t_last = now
    cpu_after = redis_cpu(conn)
    after = call_counts(conn)
    workers_cpu = children_cpu(master.children())  # start-up included: alike in every mode
    assert t_first is not None
    diff = after - before
    diff["get"] -= polls  # ours
    diff["info"] -= 1  # the "before" INFO
    diff = +diff
    window = t_last - t_first
    return {
        "processed": value,
        "first_value_seen": first_value,
        "polls": polls,
        "first_seen_after_popen_s": t_first - t_popen,
        "seconds_first_to_last": window,
        "seconds_from_master_start": t_last - t_popen,
        "jobs_per_s": (value - first_value) / window if window > 0 else None,
        "jobs_per_s_from_master_start": value / (t_last - t_popen),
        "redis_calls_per_job": sum(diff.values()) / value,
        "redis_cpu_us_per_job": (cpu_after - cpu_before) / value * 1e6,
        "children_cpu_us_per_job": workers_cpu / value * 1e6,
        "redis_calls_per_job_by_command": per_job(diff, value),
    }


def kept_memory(conn: redis.Redis, baseline: int, jobs: int) -> dict[str, Any]:
    after = used_memory(conn)
    sample: dict[str, int | None] = {}
    for label, pattern in (
        ("status_key", STATUS_PATTERN),
        ("attempts_list", ATTEMPTS_PATTERN),
        ("result_key", RESULT_PATTERN),
    ):
        key = next(conn.scan_iter(match=pattern, count=1000), None)
        sample[f"{label}_bytes"] = (
            int(conn.memory_usage(key, samples=0) or 0) if key is not None else None
        )
    return {
        "used_memory_baseline": baseline,
        "used_memory_after": after,
        "bytes_per_1000_jobs": (after - baseline) / jobs * 1000,
        "keys_after": int(conn.dbsize()),
        "memory_usage_sample": sample,
    }


def run_once(
    args: argparse.Namespace, tmp: Path, url: str, conn: redis.Redis, index: int, mode: str
) -> dict[str, Any]:
    track = mode != "off"
    directory = tmp / f"run{index}-{mode}"
    directory.mkdir()
    config = write_config(
        directory,
        url,
        app=["bench_jobs"],
        processes=args.processes,
        concurrency=args.concurrency,
        track_status=track,
        status_ttl=STATUS_TTL,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
    )
    conn.flushall()
    time.sleep(0.2)  # let the allocator settle after the flush
    baseline = used_memory(conn)
    job = RESULT_JOB_NAME if mode == "results" else JOB_NAME
    pushed = enqueue(url, conn, args.jobs, track, job)
    master = Master(config, url, directory / "master.log")
    cpu_before = redis_cpu(conn)
    before = call_counts(conn)
    t_popen = time.perf_counter()
    with master.running(f"run {index} master"):
        measured = process(conn, master, args.jobs, t_popen, before, cpu_before)
        stop_s, code = master.stop()
        memory = kept_memory(conn, baseline, args.jobs)
        return {
            "run": index,
            "mode": mode,
            "track_status": track,
            "master_pid": master.pid,
            "children_pids": sorted(master.seen),
            "enqueue": pushed,
            "process": measured,
            "memory": memory,
            "master": {
                "stop_s": stop_s,
                "exit_code": code,
                "children_left": master.left_behind,
                **master.log_counts(),
            },
        }


# -- report --------------------------------------------------------------------
def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def mode_summary(mine: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runs": len(mine),
        "jobs_per_s": [r["process"]["jobs_per_s"] for r in mine],
        "median_jobs_per_s": median([r["process"]["jobs_per_s"] for r in mine]),
        "median_jobs_per_s_from_master_start": median(
            [r["process"]["jobs_per_s_from_master_start"] for r in mine]
        ),
        "median_enqueue_jobs_per_s": median([r["enqueue"]["jobs_per_s"] for r in mine]),
        "median_redis_calls_per_job": median([r["process"]["redis_calls_per_job"] for r in mine]),
        "median_redis_cpu_us_per_job": median([r["process"]["redis_cpu_us_per_job"] for r in mine]),
        "median_children_cpu_us_per_job": median(
            [r["process"]["children_cpu_us_per_job"] for r in mine]
        ),
        "median_enqueue_redis_calls_per_job": median(
            [r["enqueue"]["redis_calls_per_job"] for r in mine]
        ),
        "median_bytes_per_1000_jobs": median([r["memory"]["bytes_per_1000_jobs"] for r in mine]),
    }


def percent_lost(base: float | None, other: float | None) -> float | None:
    """Throughput lost going from ``base`` to ``other``, in % of ``base``."""
    if base is None or other is None or not base:
        return None
    return (base - other) / base * 100


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        if mine:
            modes[mode] = mode_summary(mine)
    on, off = modes["on"], modes["off"]

    def cost(name: str) -> float | None:
        if on[name] is None or not off[name]:
            return None
        return (off[name] - on[name]) / off[name] * 100

    modes["cost_percent"] = {
        "jobs_per_s": cost("median_jobs_per_s"),
        "jobs_per_s_from_master_start": cost("median_jobs_per_s_from_master_start"),
        "enqueue_jobs_per_s": cost("median_enqueue_jobs_per_s"),
    }
    # Each "on" run against the "off" run right after it: a slow drift of the
    # machine (another load coming and going) cancels out within a pair.
    pairs = [
        (a, b) for a, b in itertools.pairwise(runs) if a["mode"] == "on" and b["mode"] == "off"
    ]
    paired = [
        (b["process"]["jobs_per_s"] - a["process"]["jobs_per_s"]) / b["process"]["jobs_per_s"] * 100
        for a, b in pairs
        if a["process"]["jobs_per_s"] and b["process"]["jobs_per_s"]
    ]
    modes["cost_percent_per_pair"] = paired
    modes["cost_percent"]["jobs_per_s_median_of_pairs"] = median(paired)
    modes["extra_redis_calls_per_job"] = (
        on["median_redis_calls_per_job"] - off["median_redis_calls_per_job"]
    )
    modes["extra_bytes_per_1000_jobs"] = (
        on["median_bytes_per_1000_jobs"] - off["median_bytes_per_1000_jobs"]
    )
    if "results" in modes:
        summarise_results(runs, modes)
    return modes


def summarise_results(runs: list[dict[str, Any]], modes: dict[str, Any]) -> None:
    """What returning a value costs: the "results" runs against the "on" runs
    (tracking on, the job returns None), each against the "on" of its round."""
    on, kept = modes["on"], modes["results"]
    modes["results_cost_percent"] = {
        "jobs_per_s": percent_lost(on["median_jobs_per_s"], kept["median_jobs_per_s"]),
        "jobs_per_s_from_master_start": percent_lost(
            on["median_jobs_per_s_from_master_start"],
            kept["median_jobs_per_s_from_master_start"],
        ),
    }
    rounds = zip(
        [r for r in runs if r["mode"] == "on"],
        [r for r in runs if r["mode"] == "results"],
        strict=False,
    )
    paired = [
        percent_lost(a["process"]["jobs_per_s"], b["process"]["jobs_per_s"]) for a, b in rounds
    ]
    modes["results_cost_percent_per_round"] = paired
    modes["results_cost_percent"]["jobs_per_s_median_of_rounds"] = median(paired)
    modes["results_extra_redis_calls_per_job"] = (
        kept["median_redis_calls_per_job"] - on["median_redis_calls_per_job"]
    )
    modes["bytes_per_1000_results"] = (
        kept["median_bytes_per_1000_jobs"] - on["median_bytes_per_1000_jobs"]
    )


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    m, c = report["machine"], report["config"]
    print(
        f"\njobmaster {m['jobmaster']}  python {m['python']}  redis {m['redis']}  "
        f"nproc {m['nproc']}  processes {c['processes']} x concurrency {c['concurrency']}  "
        f"{c['jobs']} no-op jobs per run",
        file=out,
    )
    print(
        f"\n  {'run':<4}{'mode':<8}{'enqueue/s':>11}{'jobs/s':>9}{'from start':>12}"
        f"{'calls/job':>11}{'enq calls':>11}{'KiB/1000':>10}{'stop s':>8}",
        file=out,
    )
    for r in report["runs"]:
        p, e = r["process"], r["enqueue"]
        rate = p["jobs_per_s"]
        print(
            f"  {r['run']:<4}{r['mode']:<8}"
            f"{e['jobs_per_s']:11.0f}{rate if rate is not None else float('nan'):9.0f}"
            f"{p['jobs_per_s_from_master_start']:12.0f}{p['redis_calls_per_job']:11.2f}"
            f"{e['redis_calls_per_job']:11.2f}"
            f"{r['memory']['bytes_per_1000_jobs'] / 1024:10.1f}"
            f"{r['master']['stop_s']:8.2f}",
            file=out,
        )
    s = report["summary"]
    on, off, cost = s["on"], s["off"], s["cost_percent"]

    def row(label: str, name: str, cost_name: str | None, fmt: str) -> None:
        pct = cost.get(cost_name) if cost_name else None
        tail = f"{pct:+7.1f} %" if pct is not None else ""
        print(
            f"  {label:<32}{format(on[name], fmt):>10}{format(off[name], fmt):>10}  {tail}",
            file=out,
        )

    print(f"\nMedians ({on['runs']} runs each){'on':>17}{'off':>10}  cost", file=out)
    row("jobs/s, first to last", "median_jobs_per_s", "jobs_per_s", ".0f")
    row(
        "jobs/s, from master start",
        "median_jobs_per_s_from_master_start",
        "jobs_per_s_from_master_start",
        ".0f",
    )
    pairs = ", ".join(f"{v:+.1f} %" for v in s["cost_percent_per_pair"])
    if pairs:
        print(
            f"  {'cost per on/off pair':<32}{pairs}   median "
            f"{cost['jobs_per_s_median_of_pairs']:+.1f} %",
            file=out,
        )
    row("enqueue jobs/s (push_bulk)", "median_enqueue_jobs_per_s", "enqueue_jobs_per_s", ".0f")
    row("Redis calls/job processed", "median_redis_calls_per_job", None, ".2f")
    row("Redis calls/job enqueued", "median_enqueue_redis_calls_per_job", None, ".2f")
    row("Redis CPU us/job processed", "median_redis_cpu_us_per_job", None, ".1f")
    row("workers' CPU us/job processed", "median_children_cpu_us_per_job", None, ".1f")
    print(
        f"  {'Redis KiB per 1,000 jobs kept':<32}{on['median_bytes_per_1000_jobs'] / 1024:10.1f}"
        f"{off['median_bytes_per_1000_jobs'] / 1024:10.1f}",
        file=out,
    )
    print(
        "  (cost = throughput lost by turning tracking on: (off - on) / off; Redis calls "
        "include the commands run inside Lua scripts)",
        file=out,
    )
    samples = {r["mode"]: r["memory"]["memory_usage_sample"] for r in report["runs"]}
    if "on" in samples:
        print(
            f"  MEMORY USAGE of one status key {samples['on']['status_key_bytes']} B, "
            f"one attempts list {samples['on']['attempts_list_bytes']} B",
            file=out,
        )
    if "results" in s:
        print_results(s, samples["results"], out)
    # The first run of each mode: Redis calls per job by command, side by side.
    by_mode: dict[str, dict[str, float]] = {}
    for r in report["runs"]:
        by_mode.setdefault(r["mode"], r["process"]["redis_calls_per_job_by_command"])
    shown = [m for m in MODES if m in by_mode]
    names = sorted(
        {n for calls in by_mode.values() for n in calls},
        key=lambda n: -sum(calls.get(n, 0.0) for calls in by_mode.values()),
    )
    heads = "".join(f"{m:>9}" for m in shown)
    print(f"\n  Redis calls per job processed, by command{heads}", file=out)
    for name in names:
        values = [by_mode[m].get(name, 0.0) for m in shown]
        if max(values) >= 0.005:
            print(f"    {name:<38}" + "".join(f"{v:9.2f}" for v in values), file=out)
    print("", file=out)


def print_results(s: dict[str, Any], sample: dict[str, Any], out: Any) -> None:
    """The "results" mode against "on": the cost of keeping a return value."""
    on, kept, cost = s["on"], s["results"], s["results_cost_percent"]
    print(f"\n  Keeping results ({kept['runs']} runs){'on':>13}{'results':>10}  cost", file=out)
    for label, name, fmt in (
        ("jobs/s, first to last", "median_jobs_per_s", ".0f"),
        ("jobs/s, from master start", "median_jobs_per_s_from_master_start", ".0f"),
        ("Redis calls/job processed", "median_redis_calls_per_job", ".2f"),
        ("Redis CPU us/job", "median_redis_cpu_us_per_job", ".1f"),
        ("workers' CPU us/job", "median_children_cpu_us_per_job", ".1f"),
    ):
        pct = cost.get(name.removeprefix("median_"))
        tail = f"{pct:+7.1f} %" if pct is not None else ""
        print(
            f"  {label:<32}{format(on[name], fmt):>10}{format(kept[name], fmt):>10}  {tail}",
            file=out,
        )
    rounds = ", ".join(f"{v:+.1f} %" for v in s["results_cost_percent_per_round"] if v is not None)
    median_cost = cost["jobs_per_s_median_of_rounds"]
    if rounds and median_cost is not None:
        print(f"  {'cost per round':<32}{rounds}   median {median_cost:+.1f} %", file=out)
    print(
        f"  {'Redis KiB per 1,000 results kept':<32}{s['bytes_per_1000_results'] / 1024:10.1f}"
        f"   (MEMORY USAGE of one result key {sample['result_key_bytes']} B)",
        file=out,
    )


# -- main ----------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    with private_redis(keep=args.keep_log) as (tmp, server):
        url = server.url
        conn = server.client()
        machine = machine_info(conn)
        modes = MODES if args.results else MODES[:2]
        order = [mode for _ in range(args.runs) for mode in modes]
        runs = []
        for index, mode in enumerate(order, 1):
            runs.append(run_once(args, tmp, url, conn, index, mode))
            r = runs[-1]
            print(
                f"bench: run {index}/{len(order)} {mode}: "
                f"{r['process']['jobs_per_s']:.0f} jobs/s, "
                f"enqueue {r['enqueue']['jobs_per_s']:.0f} jobs/s",
                file=sys.stderr,
            )
        return {
            "machine": machine,
            "config": {
                "jobs": args.jobs,
                "runs_per_mode": args.runs,
                "processes": args.processes,
                "concurrency": args.concurrency,
                "status_ttl": STATUS_TTL,
                "poll_interval_s": POLL_INTERVAL,
                "job": JOB_NAME,
                "result_job": RESULT_JOB_NAME if args.results else None,
            },
            "summary": summarise(runs),
            "runs": runs,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per run")
    parser.add_argument("--runs", type=int, default=3, help="runs per mode")
    parser.add_argument("--processes", type=int, default=2, help="worker children")
    parser.add_argument("--concurrency", type=int, default=8, help="threads per child")
    parser.add_argument("--results", action="store_true", help="add runs whose job returns a value")
    parser.add_argument("--no-table", action="store_true", help="JSON on stdout only")
    parser.add_argument("--keep-log", action="store_true", help="keep the temp dir and logs")
    args = parser.parse_args(argv)
    exit_on_term()
    return emit(run(args), print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
