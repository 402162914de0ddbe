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
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import redis

import jobmaster
from jobmaster.embedded import RedisServerProcess

BENCH_DIR = Path(__file__).resolve().parent
APP_MODULE = "bench_bigapp"
JOB_NAME = "bench_bigapp.noop"
NAMESPACE = "jobmaster"
PREFIX = f"{NAMESPACE}:{{{NAMESPACE}}}:"  # jobmaster.keys.Keys prefix
HEARTBEAT_PATTERN = f"{PREFIX}heartbeat:*"
PROCESSED_KEY = f"{PREFIX}stat:processed"
SHUTDOWN_TIMEOUT = 5
MB = 2**20

READY_DEADLINE = 90.0  # N children with heartbeats (each imports 200 MB without preload)
WARM_DEADLINE = 60.0  # every warm-up job processed
STOP_DEADLINE = 60.0

TARGET_CHILD_USS_RATIO = 0.15  # with preload: child USS < 15 % of the master's RSS
FIGURES = ("uss", "pss", "rss", "shared")


# -- helpers -----------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def jobmaster_executable() -> str:
    beside = Path(sys.executable).parent / "jobmaster"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("jobmaster")
    if found is None:
        raise SystemExit("bench: no `jobmaster` console script next to python or on PATH")
    return found


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no master log)"


def children_of(pid: int) -> set[int]:
    """Live (or not yet reaped) children of ``pid``, from /proc."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(p) for p in text.split()}


def is_jobmaster(pid: int) -> bool:
    try:
        return b"jobmaster" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# -- the master ----------------------------------------------------------------
def write_config(directory: Path, url: str, preload: bool, concurrency: int) -> Path:
    path = directory / "jobmaster.toml"
    path.write_text(
        "\n".join(
            [
                f'app = ["{APP_MODULE}"]',
                f'redis_url = "{url}"',
                f"preload = {'true' if preload else 'false'}",
                f"concurrency = {concurrency}",
                f"shutdown_timeout = {SHUTDOWN_TIMEOUT}",
                'log_level = "info"',
                f'data_dir = "{directory / "data"}"',
                "",
            ]
        )
    )
    return path


def start_master(
    config: Path, url: str, processes: int, app_mb: int, logfile: Path
) -> subprocess.Popen[bytes]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("JOBMASTER_") and k != "REDIS_URL"
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH")]))
    env["BENCH_REDIS_URL"] = url
    env["BENCH_BIGAPP_MB"] = str(app_mb)
    command = [
        jobmaster_executable(),
        "-c",
        str(config),
        "--redis-url",
        url,
        "--processes",
        str(processes),
    ]
    with logfile.open("ab") as log:
        return subprocess.Popen(
            command,
            cwd=BENCH_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C to the bench is handled by our finally
        )


def stop_master(master: subprocess.Popen[bytes], seen: set[int]) -> dict[str, Any]:
    """SIGTERM, wait; SIGKILL if it outlives STOP_DEADLINE.

    Afterwards any child pid ever seen that is still a jobmaster process is
    SIGKILLed (only if the master failed to stop them) and reported."""
    started = time.monotonic()
    if master.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            master.send_signal(signal.SIGTERM)
        try:
            master.wait(timeout=STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                master.kill()
            master.wait(timeout=10)
    elapsed = time.monotonic() - started
    leftovers = []
    for pid in sorted(seen):
        if is_jobmaster(pid):
            leftovers.append(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return {"stop_s": elapsed, "exit_code": master.returncode, "children_left": leftovers}


def heartbeats(conn: redis.Redis) -> list[dict[str, str]]:
    found = []
    for key in conn.scan_iter(match=HEARTBEAT_PATTERN, count=100):
        fields = {text(k): text(v) for k, v in conn.hgetall(key).items()}
        if fields:
            found.append(fields)
    return found


def wait_ready(
    conn: redis.Redis,
    master: subprocess.Popen[bytes],
    processes: int,
    logfile: Path,
    seen: set[int],
) -> tuple[float, list[int]]:
    """Until the master has ``processes`` live children with heartbeats (and its own
    heartbeat is there); (seconds waited, child pids)."""
    started = time.monotonic()
    deadline = started + READY_DEADLINE
    while time.monotonic() < deadline:
        if master.poll() is not None:
            raise RuntimeError(
                f"master exited with code {master.returncode}; log tail:\n{log_tail(logfile)}"
            )
        alive = {p for p in children_of(master.pid) if is_jobmaster(p)}  # zombies excluded
        seen |= alive
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
        f"log tail:\n{log_tail(logfile)}"
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


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


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
    logfile = directory / "master.log"
    config = write_config(directory, url, preload, args.concurrency)
    seen: set[int] = set()
    master = start_master(config, url, args.processes, args.app_mb, logfile)
    stopped: dict[str, Any] | None = None
    try:
        startup, children = wait_ready(conn, master, args.processes, logfile, seen)
        idle = sample(master.pid, children, args.samples, args.interval)
        warm = warm_up(url, conn, args.jobs, children)
        time.sleep(args.settle)
        measured = sample(master.pid, children, args.samples, args.interval)
        stopped = stop_master(master, seen)
        log = logfile.read_text(errors="replace")
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
                **stopped,
                "log_warnings": log.count("WARNING"),
                "log_errors": log.count("ERROR") + log.count("Traceback"),
            },
        }
    except BaseException:
        print(f"bench: {mode} master log tail:\n{log_tail(logfile)}", file=sys.stderr)
        raise
    finally:
        if stopped is None:
            stop_master(master, seen)
        with contextlib.suppress(redis.RedisError):
            conn.flushall()  # the private server only: a clean slate for the next mode


# -- report --------------------------------------------------------------------
def machine_info(conn: redis.Redis) -> dict[str, Any]:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        affinity = os.cpu_count()
    memory = psutil.virtual_memory()
    return {
        "nproc": affinity,
        "cpu_count": os.cpu_count(),
        "memory_total_mb": memory.total / MB,
        "memory_available_mb": memory.available / MB,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "redis": conn.info("server")["redis_version"],
        "redis_py": redis.__version__,
        "psutil": psutil.__version__,
        "jobmaster": jobmaster.__version__,
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
    tmp = Path(tempfile.mkdtemp(prefix="jobmaster-bench-"))
    server = RedisServerProcess(tmp / "redis", port=free_port(), appendonly=False)
    try:
        server.start()
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
    finally:
        server.stop()
        if args.keep_log:
            print(f"bench: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


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
    report = run(args)
    if not args.no_table:
        print_table(report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
