"""Benchmark: memory per child with a preloaded 200 MB app, preload on vs off.

This is a benchmark, not a test: it asserts nothing and is never run by pytest.

    cd /work/main && .venv/bin/python bench/memory.py [--processes 2] [--concurrency 5]
        [--jobs 200] [--samples 5] [--interval 1] [--app-mb 200] [--no-table] [--keep-log]

What it does:

1. Starts a private ``redis-server`` on a free loopback port in a temporary
   directory (``jobmaster.embedded.RedisServerProcess``, no persistence). The
   shared Redis on 6379 is never touched: the master gets the private URL in
   its TOML *and* as ``--redis-url``, and every ``JOBMASTER_*`` /
   ``REDIS_URL`` variable is removed from its environment.
2. For ``preload = true`` and then ``preload = false``: starts the supervisor,
   ``jobmaster -c <tmp>/jobmaster.toml --processes N`` with
   ``app = ["bench_bigapp"]`` (bench/ is put on PYTHONPATH; the module holds
   a ~200 MB ``bytes`` block that is really resident, see bench_bigapp.py),
   ``concurrency`` threads per child, and polls (with a deadline) until the
   master has N live children, each with a heartbeat
   (``jobmaster:{jobmaster}:heartbeat:*`` with ``master_pid`` = the master),
   and the master's own heartbeat (``role = master``) is there.
3. "idle" figures: ``--samples`` measurements ``--interval`` s apart of the
   master and each child with psutil ``memory_full_info()`` (USS, PSS, RSS,
   in MiB); the median of each figure is reported.
4. Warm-up: ``--jobs`` ``bench_bigapp.noop`` jobs in one
   ``jobmaster.Client(url).push_bulk``; waits until
   ``jobmaster:{jobmaster}:stat:processed`` has grown by that many. The CPU
   time each child spent meanwhile shows whether both took part.
5. "warm" figures: the same sampling again. These are the headline figures;
   warm minus idle is what running jobs dirtied in the children (with preload:
   pages shared with the master that refcount/GC writes copied).
6. Stops the master with SIGTERM and waits for it (any child still alive
   afterwards is SIGKILLed and reported), flushes the private Redis for the
   next mode. Finally stops the server and removes the temporary directory;
   all of it in ``finally`` blocks, so an error or Ctrl-C leaves no process
   behind.

Figures: per child USS/PSS/RSS; child USS / master RSS (the issue's target:
< 15 % with preload and the 200 MB app); the total of master + children as
the sum of PSS (each shared page counted once overall), which is the memory
preload really saves. With preload off the master never imports the app, so
the ratio is > 100 % there and only says that each child holds its own copy.

Output: one JSON object with every figure (plus nproc, memory, Python, Redis,
redis-py, psutil versions) on stdout; a readable table on stderr
(``--no-table`` to omit it).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import harness
import psutil
import redis
from harness import (
    PREFIX,
    Master,
    cpu_seconds,
    emit,
    exit_on_term,
    log_tail,
    private_redis,
    text,
    write_config,
)

import jobmaster

APP_MODULE = "bench_bigapp"
JOB_NAME = "bench_bigapp.noop"
HEARTBEAT_PATTERN = f"{PREFIX}heartbeat:*"
PROCESSED_KEY = f"{PREFIX}stat:processed"
SHUTDOWN_TIMEOUT = 5
MB = 2**20

READY_DEADLINE = 90.0  # N children with heartbeats (each imports 200 MB without preload)
WARM_DEADLINE = 60.0  # every warm-up job processed

TARGET_CHILD_USS_RATIO = 0.15  # with preload: child USS < 15 % of the master's RSS
FIGURES = ("uss", "pss", "rss", "shared")


# -- the master ----------------------------------------------------------------
def heartbeats(conn: redis.Redis) -> list[dict[str, str]]:
    found = []
    for key in conn.scan_iter(match=HEARTBEAT_PATTERN, count=100):
        fields = {text(k): text(v) for k, v in conn.hgetall(key).items()}
        if fields:
            found.append(fields)
    return found


def wait_ready(conn: redis.Redis, master: Master, processes: int) -> tuple[float, list[int]]:
    """Until the master has ``processes`` live children with heartbeats (and its own
    heartbeat is there); (seconds waited, child pids)."""
    started = time.monotonic()
    deadline = started + READY_DEADLINE
    while time.monotonic() < deadline:
        if not master.alive():
            raise RuntimeError(
                f"master exited with code {master.returncode()}; "
                f"log tail:\n{log_tail(master.logfile)}"
            )
        alive = master.children()  # zombies excluded
        beats = heartbeats(conn)
        master_beat = any(
            b.get("role") == "master" and b.get("pid") == str(master.pid) for b in beats
        )
        child_beats = {
            int(b["pid"])
            for b in beats
            if b.get("master_pid") == str(master.pid) and b.get("pid", "").isdigit()
        }
        ready = alive & child_beats
        if master_beat and len(alive) == processes and len(ready) == processes:
            return time.monotonic() - started, sorted(ready)
        time.sleep(0.05)
    raise RuntimeError(
        f"the pool never had {processes} ready children within {READY_DEADLINE}s; "
        f"log tail:\n{log_tail(master.logfile)}"
    )


# -- measuring -----------------------------------------------------------------
def memory_of(pid: int) -> dict[str, float]:
    info = psutil.Process(pid).memory_full_info()
    return {name: getattr(info, name) / MB for name in FIGURES}


def sample(master_pid: int, children: list[int], samples: int, interval: float) -> dict[str, Any]:
    """``samples`` measurements ``interval`` s apart; medians, first and last of each."""
    pids = [master_pid, *children]
    series: dict[int, list[dict[str, float]]] = {pid: [] for pid in pids}
    for index in range(samples):
        if index:
            time.sleep(interval)
        for pid in pids:
            series[pid].append(memory_of(pid))

    def summary(pid: int) -> dict[str, Any]:
        runs = series[pid]
        result: dict[str, Any] = {"pid": pid}
        for name in FIGURES:
            values = [r[name] for r in runs]
            result[f"{name}_mb"] = statistics.median(values)
            result[f"{name}_mb_first"] = values[0]
            result[f"{name}_mb_last"] = values[-1]
        return result

    master = summary(master_pid)
    kids = [summary(pid) for pid in children]
    master_rss = master["rss_mb"]
    for kid in kids:
        kid["uss_over_master_rss"] = kid["uss_mb"] / master_rss if master_rss else None
    return {
        "master": master,
        "children": kids,
        "total_pss_mb": master["pss_mb"] + sum(k["pss_mb"] for k in kids),
        "total_uss_mb": master["uss_mb"] + sum(k["uss_mb"] for k in kids),
        "total_rss_mb": master["rss_mb"] + sum(k["rss_mb"] for k in kids),
        "max_child_uss_over_master_rss": max(
            (k["uss_over_master_rss"] for k in kids if k["uss_over_master_rss"] is not None),
            default=None,
        ),
    }


def warm_up(url: str, conn: redis.Redis, jobs: int, children: list[int]) -> dict[str, Any]:
    """Push ``jobs`` no-op jobs in bulk and wait until stat:processed has grown by that many."""
    before = int(conn.get(PROCESSED_KEY) or 0)
    cpu_before = {pid: cpu_seconds(pid) for pid in children}
    started = time.monotonic()
    jobmaster.Client(url).push_bulk({"job": JOB_NAME, "args": [[] for _ in range(jobs)]})
    deadline = started + WARM_DEADLINE
    done = 0
    while time.monotonic() < deadline:
        done = int(conn.get(PROCESSED_KEY) or 0) - before
        if done >= jobs:
            break
        time.sleep(0.02)
    else:
        raise RuntimeError(f"only {done}/{jobs} warm-up jobs processed in {WARM_DEADLINE}s")
    elapsed = time.monotonic() - started
    return {
        "jobs": jobs,
        "processed": done,
        "seconds": elapsed,
        "child_cpu_s": {str(pid): cpu_seconds(pid) - cpu_before[pid] for pid in children},
    }


def run_mode(
    args: argparse.Namespace, tmp: Path, url: str, conn: redis.Redis, preload: bool
) -> dict[str, Any]:
    mode = "preload" if preload else "no-preload"
    directory = tmp / mode
    directory.mkdir()
    config = write_config(
        directory,
        url,
        app=[APP_MODULE],
        preload=preload,
        concurrency=args.concurrency,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
    )
    master = Master(
        config,
        url,
        directory / "master.log",
        extra_args=["--processes", str(args.processes)],
        env={"BENCH_BIGAPP_MB": str(args.app_mb)},
    )
    try:
        with master.running(f"{mode} master"):
            startup, children = wait_ready(conn, master, args.processes)
            idle = sample(master.pid, children, args.samples, args.interval)
            warm = warm_up(url, conn, args.jobs, children)
            time.sleep(args.settle)
            measured = sample(master.pid, children, args.samples, args.interval)
            stop_s, code = master.stop()
    finally:
        with contextlib.suppress(redis.RedisError):
            conn.flushall()  # the private server only: a clean slate for the next mode
    growth = [
        {
            "pid": after["pid"],
            "uss_mb": after["uss_mb"] - before["uss_mb"],
            "pss_mb": after["pss_mb"] - before["pss_mb"],
            "rss_mb": after["rss_mb"] - before["rss_mb"],
        }
        for before, after in zip(idle["children"], measured["children"], strict=True)
    ]
    return {
        "preload": preload,
        "master_pid": master.pid,
        "children_pids": children,
        "startup_s": startup,
        "idle": idle,
        "warm_up": warm,
        "warm": measured,
        "child_growth_warm_minus_idle": growth,
        "master": {
            "stop_s": stop_s,
            "exit_code": code,
            "children_left": master.left_behind,
            **master.log_counts(),
        },
    }


# -- report --------------------------------------------------------------------
def machine_info(conn: redis.Redis) -> dict[str, Any]:
    """The usual figures, plus the RAM: a 200 MB app per child must fit."""
    memory = psutil.virtual_memory()
    return {
        **harness.machine_info(conn),
        "memory_total_mb": memory.total / MB,
        "memory_available_mb": memory.available / MB,
        "psutil": psutil.__version__,
    }


def print_table(report: dict[str, Any]) -> None:
    out = sys.stderr
    m, c = report["machine"], report["config"]
    print(
        f"\njobmaster {m['jobmaster']}  python {m['python']}  redis {m['redis']}  "
        f"nproc {m['nproc']}  RAM {m['memory_total_mb'] / 1024:.1f} GiB  "
        f"processes {c['processes']} x concurrency {c['concurrency']}  app {c['app_mb']} MB",
        file=out,
    )
    print(
        f"Medians of {c['samples']} samples {c['interval_s']:g} s apart, after "
        f"{c['jobs']} no-op jobs (MiB)",
        file=out,
    )
    header = f"  {'process':<16}{'USS':>9}{'PSS':>9}{'RSS':>9}{'USS/master RSS':>16}{'growth':>9}"
    for mode in report["modes"]:
        warm = mode["warm"]
        label = "preload = true" if mode["preload"] else "preload = false"
        print(
            f"\n{label}: ready after {mode['startup_s']:.2f} s, warm-up "
            f"{mode['warm_up']['seconds']:.2f} s, SIGTERM to exit "
            f"{mode['master']['stop_s']:.2f} s (code {mode['master']['exit_code']})",
            file=out,
        )
        print(header, file=out)
        mm = warm["master"]
        print(
            f"  {'master ' + str(mm['pid']):<16}{mm['uss_mb']:9.1f}{mm['pss_mb']:9.1f}"
            f"{mm['rss_mb']:9.1f}",
            file=out,
        )
        growth = {g["pid"]: g["uss_mb"] for g in mode["child_growth_warm_minus_idle"]}
        for kid in warm["children"]:
            ratio = kid["uss_over_master_rss"]
            print(
                f"  {'child ' + str(kid['pid']):<16}{kid['uss_mb']:9.1f}{kid['pss_mb']:9.1f}"
                f"{kid['rss_mb']:9.1f}{ratio * 100:15.1f}%{growth[kid['pid']]:+9.1f}",
                file=out,
            )
        print(
            f"  {'total':<16}{warm['total_uss_mb']:9.1f}{warm['total_pss_mb']:9.1f}"
            f"{warm['total_rss_mb']:9.1f}",
            file=out,
        )
        if mode["preload"]:
            worst = warm["max_child_uss_over_master_rss"]
            mark = "ok" if worst < TARGET_CHILD_USS_RATIO else "MISSED"
            print(
                f"  target: child USS < {TARGET_CHILD_USS_RATIO:.0%} of master RSS: "
                f"worst {worst:.1%}  {mark}",
                file=out,
            )
        cpu = ", ".join(f"{pid}: {s:.2f} s" for pid, s in mode["warm_up"]["child_cpu_s"].items())
        print(f"  child CPU during warm-up: {cpu}", file=out)
    cmp = report["comparison"]
    if cmp:
        print(
            f"\nTotal (sum of PSS), master + {c['processes']} children: "
            f"preload {cmp['total_pss_mb_preload']:.1f} MiB, "
            f"no preload {cmp['total_pss_mb_no_preload']:.1f} MiB: "
            f"preload saves {cmp['pss_saved_mb']:.1f} MiB ({cmp['pss_saved_fraction']:.0%})",
            file=out,
        )
    print("  (growth = child USS warm minus idle, i.e. dirtied by running jobs)\n", file=out)


# -- main ----------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    with private_redis(keep=args.keep_log) as (tmp, server):
        url = server.url
        conn = server.client()
        machine = machine_info(conn)
        modes = [run_mode(args, tmp, url, conn, preload) for preload in (True, False)]
        on, off = modes
        saved = off["warm"]["total_pss_mb"] - on["warm"]["total_pss_mb"]
        comparison = {
            "total_pss_mb_preload": on["warm"]["total_pss_mb"],
            "total_pss_mb_no_preload": off["warm"]["total_pss_mb"],
            "pss_saved_mb": saved,
            "pss_saved_fraction": saved / off["warm"]["total_pss_mb"],
            "mean_child_uss_mb_preload": statistics.fmean(
                k["uss_mb"] for k in on["warm"]["children"]
            ),
            "mean_child_uss_mb_no_preload": statistics.fmean(
                k["uss_mb"] for k in off["warm"]["children"]
            ),
        }
        return {
            "machine": machine,
            "config": {
                "processes": args.processes,
                "concurrency": args.concurrency,
                "jobs": args.jobs,
                "samples": args.samples,
                "interval_s": args.interval,
                "settle_s": args.settle,
                "app_mb": args.app_mb,
                "mb": "MiB (2**20 bytes)",
            },
            "targets": {"preload_child_uss_over_master_rss": TARGET_CHILD_USS_RATIO},
            "modes": modes,
            "comparison": comparison,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--processes", type=int, default=2, help="worker children")
    parser.add_argument("--concurrency", type=int, default=5, help="threads per child")
    parser.add_argument("--jobs", type=int, default=200, help="no-op warm-up jobs")
    parser.add_argument("--samples", type=int, default=5, help="measurements per phase")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--settle", type=float, default=1.0, help="wait after warm-up (s)")
    parser.add_argument("--app-mb", type=int, default=200, help="size of the app's block")
    parser.add_argument("--no-table", action="store_true", help="JSON on stdout only")
    parser.add_argument("--keep-log", action="store_true", help="keep the temp dir and logs")
    args = parser.parse_args(argv)
    exit_on_term()
    return emit(run(args), print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
