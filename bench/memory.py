"""Benchmark: memory per child with a preloaded 200 MB app, preload on vs off;
with ``--leaks``, which leak rates the memory killer holds in a real cgroup.

This is a benchmark, not a test: it asserts nothing and is never run by pytest.

    .venv/bin/python bench/memory.py --leaks [--rates 10,20,40,60,80]
        [--limit-mb 600] [--seconds 30] [--processes 3] [--concurrency 2]

``--leaks`` (needs root and a memory cgroup controller, v1 or v2): for each
rate R (MB/s per child) and for ``max_child_mb`` 0 (the default) and
"auto", a new cgroup with ``--limit-mb`` (tests/cgroup.py: made under the
bench's own group, emptied and removed after), a master started inside it
at the default memory settings (memory_check_interval 5, memory_grace 30),
``processes x concurrency`` threads, and enough ``bench_leak.leak`` jobs for
``--seconds``: each keeps R / concurrency MB for good and takes 1 s, so
every child grows R MB/s for as long as it lives. Figures per run: the
kernel's OOM kills in the group (``oom_kill`` of memory.oom_control /
memory.events: the number that must stay 0), the master's memory kills
(the last line), children told to push back for want of room and the jobs
they pushed back (each runs again), recycles, jobs completed twice or never,
the group's peak usage, and the time to run them all.

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


# -- leaks in a real cgroup (--leaks) ----------------------------------------------
LEAK_JOB = "bench_leak.leak"
LEAK_RUNS_KEY = "leak:runs"  # bench_leak.RUNS_KEY
LEAK_DEADLINE_MARGIN = 120.0  # seconds beyond --seconds before a run is called stuck


def leak_run(
    args: argparse.Namespace, tmp: Path, url: str, conn: redis.Redis, rate: float, limit: object
) -> dict[str, Any]:
    """One rate, one max_child_mb, in a cgroup of its own."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/cgroup.py
    from tests.cgroup import make

    directory = tmp / f"leak-{rate:g}-{limit}"
    directory.mkdir()
    config = write_config(
        directory,
        url,
        app=["bench_leak"],
        processes=args.processes,
        concurrency=args.concurrency,
        max_child_mb=limit,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
    )
    group = make(args.limit_mb * MB)
    master = Master(config, url, directory / "master.log", wrap=group.wrap)
    jobs = int(args.processes * args.concurrency * args.seconds)
    tokens = [f"t{n}" for n in range(jobs)]
    per_job = rate / args.concurrency
    started = time.monotonic()
    try:
        with master.running(f"leak {rate:g} MB/s master"):
            wait_ready(conn, master, args.processes)
            started = time.monotonic()
            jobmaster.Client(url).push_bulk(
                {"job": LEAK_JOB, "args": [[t, per_job, 1.0] for t in tokens]}
            )
            deadline = started + args.seconds + LEAK_DEADLINE_MARGIN
            while time.monotonic() < deadline and conn.hlen(LEAK_RUNS_KEY) < jobs:
                time.sleep(0.2)
            elapsed = time.monotonic() - started
            runs = [int(v) for v in conn.hvals(LEAK_RUNS_KEY)]
            oom_kills, peak = group.oom_kills(), group.peak()
            master.stop()
    finally:
        group.destroy()
        with contextlib.suppress(redis.RedisError):
            conn.flushall()
    log = master.logfile.read_text(errors="replace")
    return {
        "rate_mb_s_per_child": rate,
        "max_child_mb": limit,
        "jobs": jobs,
        "seconds": elapsed,
        "kernel_oom_kills": oom_kills,
        "memory_kills": log.count("memory kill: child"),
        "pushed_back_no_room": log.count("no room to finish its jobs"),
        "jobs_pushed_back": sum(
            int(line.split("stopping with ", 1)[1].split(" ", 1)[0])
            for line in log.splitlines()
            if "stopping with " in line and "still running: pushing them back" in line
        ),
        "recycles": log.count(": recycling it ("),
        "ran_twice": sum(1 for r in runs if r > 1),
        "lost": jobs - len(runs),
        "peak_mb": (peak or 0) / MB,
        "held": oom_kills == 0 and len(runs) == jobs,
    }


def run_leaks(args: argparse.Namespace) -> dict[str, Any]:
    rates = [float(r) for r in args.rates.split(",")]
    with private_redis(keep=args.keep_log) as (tmp, server):
        conn = server.client()
        machine = machine_info(conn)
        runs = [
            leak_run(args, tmp, server.url, conn, rate, limit)
            for limit in (0, "auto")
            for rate in rates
        ]
    return {
        "machine": machine,
        "config": {
            "limit_mb": args.limit_mb,
            "processes": args.processes,
            "concurrency": args.concurrency,
            "seconds": args.seconds,
            "memory_settings": "defaults (memory_check_interval 5, memory_grace 30)",
        },
        "leaks": runs,
    }


def print_leaks(report: dict[str, Any]) -> None:
    c = report["config"]
    out = sys.stderr
    print(
        f"\n{c['processes']} children x {c['concurrency']} threads in a {c['limit_mb']} MB "
        f"cgroup, {c['memory_settings']}",
        file=out,
    )
    header = (
        f"  {'MB/s/child':>10} {'max_child_mb':>12} {'jobs':>5} {'OOM':>4} {'kills':>6} "
        f"{'no room':>8} {'rerun':>6} {'recycles':>8} {'twice':>6} {'lost':>5} {'peak MB':>8} "
        f"{'s':>6}"
    )
    print(header, file=out)
    for r in report["leaks"]:
        print(
            f"  {r['rate_mb_s_per_child']:>10g} {r['max_child_mb']!s:>12} {r['jobs']:>5} "
            f"{r['kernel_oom_kills']:>4} {r['memory_kills']:>6} {r['pushed_back_no_room']:>8} "
            f"{r['jobs_pushed_back']:>6} {r['recycles']:>8} {r['ran_twice']:>6} {r['lost']:>5} "
            f"{r['peak_mb']:>8.0f} "
            f"{r['seconds']:>6.1f}",
            file=out,
        )


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
    parser.add_argument("--leaks", action="store_true", help="leak rates in a real cgroup")
    parser.add_argument("--rates", default="10,20,40,60,80", help="MB/s per child, with --leaks")
    parser.add_argument("--limit-mb", type=int, default=600, help="the cgroup's, with --leaks")
    parser.add_argument("--seconds", type=float, default=30, help="of jobs, with --leaks")
    args = parser.parse_args(argv)
    exit_on_term()
    if args.leaks:
        return emit(run_leaks(args), print_leaks, args.no_table)
    return emit(run(args), print_table, args.no_table)


if __name__ == "__main__":
    sys.exit(main())
