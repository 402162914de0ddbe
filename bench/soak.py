"""Soak: steady load for a long time; the master's memory and file descriptors stay flat.

    .venv/bin/python bench/soak.py --minutes 30        # by hand, not in CI

A private ``redis-server`` (the shared one on 6379 is never touched) and
``jobmaster -c`` with 2 children and ``max_jobs_per_child`` low, so children
are recycled all the time: each recycle is a fork, a reap, a pipe and a
Redis round of the master, which is where a leak would show. A producer
pushes ``bench_jobs.noop`` at a steady ``--rate``; every ``--sample``
seconds the bench reads the master's RSS and USS (psutil) and its open file
descriptors (/proc/PID/fd), and the number of children started so far.

It prints a table of samples (stderr) and JSON (stdout) and checks: every
job pushed was done, the master's fds at the end equal those after the
warm-up, and its RSS grew by less than ``--max-growth-mb`` between the
warm-up (first ``--warmup`` minutes) and the end. Exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from harness import Master, emit, exit_on_term, machine_info, private_redis, write_config

import jobmaster
from jobmaster.embedded import RedisServerProcess
from jobmaster.keys import Keys

KEYS = Keys("jobmaster")
JOB = "bench_jobs.noop"


def master_sample(master: Master, started: float, conn: Any) -> dict[str, Any]:
    proc = psutil.Process(master.pid)
    memory = proc.memory_full_info()
    return {
        "minute": round((time.monotonic() - started) / 60, 2),
        "rss_mb": round(memory.rss / 2**20, 2),
        "uss_mb": round(memory.uss / 2**20, 2),
        "fds": len(list(Path(f"/proc/{master.pid}/fd").iterdir())),
        "threads": proc.num_threads(),
        "children_started": len(re.findall(r"child \d+ started", master.logfile.read_text())),
        "processed": int(conn.get(KEYS.stat("processed")) or 0),
    }


def produce(client: jobmaster.Client, rate: float, until: float) -> int:
    """Push ``rate`` jobs a second in batches of a tenth of a second until ``until``."""
    pushed = 0
    batch = max(1, round(rate / 10))
    tick = time.monotonic()
    while time.monotonic() < until:
        client.push_bulk({"job": JOB, "args": [[] for _ in range(batch)]})
        pushed += batch
        tick += batch / rate
        time.sleep(max(0.0, tick - time.monotonic()))
    return pushed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=3, help="minutes before the baseline")
    parser.add_argument("--rate", type=float, default=300, help="jobs per second")
    parser.add_argument("--max-jobs-per-child", type=int, default=2000)
    parser.add_argument("--sample", type=float, default=30, help="seconds between samples")
    parser.add_argument("--max-growth-mb", type=float, default=2.0)
    args = parser.parse_args(argv)
    exit_on_term()

    with private_redis(prefix="jobmaster-soak-") as (tmp, server):
        report = soak(args, tmp, server)
    return emit(report, print_table)


def soak(args: argparse.Namespace, tmp: Path, server: RedisServerProcess) -> dict[str, Any]:
    """Start the master, load it for ``--minutes``, stop it; the verdict."""
    conn = server.client()
    config = write_config(
        tmp,
        server.url,
        app=["bench_jobs"],
        processes=2,
        concurrency=5,
        max_jobs_per_child=args.max_jobs_per_child,
    )
    samples: list[dict[str, Any]] = []
    with Master(config, server.url, tmp / "master.log").running() as master:
        master.wait_children(2)
        client = jobmaster.Client(server.url)
        started = time.monotonic()
        end = started + args.minutes * 60
        pushed = 0
        while time.monotonic() < end:
            until = min(end, time.monotonic() + args.sample)
            pushed += produce(client, args.rate, until)
            samples.append(master_sample(master, started, conn))
            print(json.dumps(samples[-1]), file=sys.stderr)
        deadline = time.monotonic() + 60
        while int(conn.get(KEYS.stat("processed")) or 0) < pushed and time.monotonic() < deadline:
            time.sleep(0.2)
        processed = int(conn.get(KEYS.stat("processed")) or 0)
        stop_s, code = master.stop()
        return verdict(args, samples, pushed, processed, stop_s, code, machine_info(conn))


def verdict(
    args: argparse.Namespace,
    samples: list[dict[str, Any]],
    pushed: int,
    processed: int,
    stop_s: float,
    code: int | None,
    machine: dict[str, Any],
) -> dict[str, Any]:
    after_warmup = [s for s in samples if s["minute"] >= args.warmup] or samples[-1:]
    base, last = after_warmup[0], samples[-1]
    growth = last["rss_mb"] - base["rss_mb"]
    checks = {
        "every job pushed was done": processed >= pushed,
        "master fds flat after warm-up": last["fds"] == base["fds"],
        f"master RSS grew < {args.max_growth_mb} MB after warm-up": growth < args.max_growth_mb,
        "master stopped with exit 0": code == 0,
    }
    return {
        "machine": machine,
        "config": vars(args),
        "pushed": pushed,
        "processed": processed,
        "children_started": last["children_started"],
        "master": {
            "baseline": base,
            "end": last,
            "rss_growth_mb": round(growth, 2),
            "rss_max_mb": max(s["rss_mb"] for s in samples),
            "fds_min_max": [min(s["fds"] for s in samples), max(s["fds"] for s in samples)],
            "stop_s": round(stop_s, 2),
            "exit_code": code,
        },
        "samples": samples,
        "checks": checks,
        "ok": all(checks.values()),
    }


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    m = report["master"]
    print(
        f"\nsoak: {report['config']['minutes']:g} min at {report['config']['rate']:g} jobs/s, "
        f"{report['pushed']:,} pushed, {report['processed']:,} done, "
        f"{report['children_started']} children started (recycled every "
        f"~{report['config']['max_jobs_per_child']} jobs)",
        file=out,
    )
    print(f"  {'minute':>8}{'RSS MB':>9}{'USS MB':>9}{'fds':>6}{'threads':>9}", file=out)
    for s in report["samples"]:
        print(
            f"  {s['minute']:8.1f}{s['rss_mb']:9.2f}{s['uss_mb']:9.2f}{s['fds']:6}{s['threads']:9}",
            file=out,
        )
    print(
        f"  RSS growth after warm-up {m['rss_growth_mb']:+.2f} MB, fds {m['fds_min_max']}, "
        f"TERM to exit {m['stop_s']} s (code {m['exit_code']})",
        file=out,
    )
    for check, passed in report["checks"].items():
        print(f"  {'ok  ' if passed else 'FAIL'} {check}", file=out)


if __name__ == "__main__":
    sys.exit(main())
