"""Benchmark: jobmaster's async jobs beside its threads, arq, taskiq, SAQ and Dramatiq (issue 26).

This is a benchmark, not a test: it asserts nothing and is never run by pytest.

    cd bench && ../.venv/bin/python async_peers.py
        [--systems jobmaster-async,jobmaster-threads,arq,taskiq,saq,dramatiq]
        [--workloads sleep,http,memory] [--loops uvloop,asyncio] [--runs 3]
        [--jobs 10000] [--threads 8] [--dramatiq-threads 100]
        [--async-concurrency N] [--memory-jobs 1000] [--jobmaster-log-level info]
        [--max-load 2] [--load-wait 300] [--deadline 300]
        [--skip-install | --fresh] [--cache-dir DIR] [--no-table] [--keep-logs]

The jobmaster columns run from the venv running this script, which needs
``aiohttp`` (the jobs' HTTP client) and ``uvloop`` (the extra measured both
ways; the HTTP server uses it too): ``.venv/bin/pip install -e '.[uvloop]' aiohttp``.
Each peer is installed from PyPI into a venv of its own, under
``~/.cache/jobmaster-bench/venvs/async-<peer>`` (apart from bench/peers.py's
venvs, whose packages differ), by bench/peers.py's installer, and reused on
later runs: ``arq``, ``saq[redis]``, ``taskiq`` with ``taskiq-redis``,
``dramatiq[redis]``, each with ``redis``, ``psutil`` and ``aiohttp``, and no
uvloop (the JSON's versions say what each venv holds).

One private ``redis-server`` (bench/harness.py's, no persistence) serves
every column in turn, FLUSHALLed before each measure; one local HTTP server
(bench/async_peers/http_server.py, its own process on a free loopback port,
a bare asyncio protocol answering at once) serves the ``http`` workload. Each
measure runs in the column's own venv, as ``<venv>/bin/python
bench/async_peers/driver.py SYSTEM WORKLOAD --json``: ``--jobs`` jobs queued
through the system's single enqueue (an async producer awaits 100 at a
time), then its worker started with 2 processes:

- ``jobmaster-async[<loop>]``: ``jobmaster -c jobmaster.toml``,
  ``processes = 2``, ``async_loop = <loop>`` for each of ``--loops``,
  ``async def`` jobs, ``async_concurrency`` and ``concurrency`` at their
  defaults (100 and 5) unless ``--async-concurrency``;
- ``jobmaster-threads``: the same with plain ``def`` jobs (``time.sleep``,
  a keep-alive ``http.client`` GET) and ``concurrency = --threads`` (8);
- arq: ``arq async_arq_app.WorkerSettings`` twice (arq runs one process;
  bench/async_peers/launch.py starts both), ``max_jobs = 100`` (its default
  is 10);
- taskiq: ``taskiq worker -w 2 async_taskiq_app:broker`` (taskiq-redis
  ``RedisStreamBroker``, ``--max-async-tasks`` 100 by default);
- SAQ: ``saq async_saq_app.settings --workers 2``, ``concurrency`` 100 (its
  default is 10);
- Dramatiq: ``dramatiq -p 2 -t --dramatiq-threads async_dramatiq_app``, its
  ``AsyncIO`` middleware and ``async def`` actors (a worker thread waits on
  each coroutine, so ``-t`` is its jobs in flight: 100, as the others).

The workloads (``--workloads``), with the same job bodies for every system
(bench/async_peers/amarks.py):

- **sleep**: each job awaits ``asyncio.sleep(0.02)``;
- **http**: each job makes one GET to the local server (async jobs: one
  aiohttp session per event loop, reused; thread jobs: a keep-alive
  connection per thread);

then INCRs the done counter. Jobs/s is over the jobs' own window, from the
earliest start to the last end (each process writes its first start, the
job that completes the count its end). Over the driver's polling window
(bench/peers/driver.py's drain): the worker tree's CPU per job (psutil, the
pool's processes and what they reaped), Redis's and the HTTP server's;
Redis commands per job over enqueue and drain (INFO commandstats).

- **memory** (once per loop, after the runs): one jobmaster child
  (``processes = 1``, ``async_concurrency = --memory-jobs``) idle after one
  async job, then holding ``--memory-jobs`` async jobs in flight, each
  awaiting a long sleep (counted as they start): its USS and RSS (psutil)
  both times, and the difference per job.

``--runs`` times (default 3) each column runs each workload, one column
further down the list each run; the table gives medians. Issue 26's target,
each ``jobmaster-async`` column's jobs/s >= 2x the fastest of the other
columns (jobmaster-threads included), is printed MET or missed per workload.
The machine has 2 cores that may be shared: the 1-minute load average is
recorded before and after every measure, and the run waits (up to
``--load-wait`` s) for it to fall to ``--max-load`` before it starts.
Output: the JSON on stdout, the table on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peers
import psutil
import redis
from async_peers_report import print_table, summarize
from harness import (
    BENCH_DIR,
    Master,
    exit_on_term,
    free_port,
    machine_info,
    private_redis,
    write_config,
)
from peers import Env, csv_list, parse_output, proctree, python3_version, run_order, stop_driver

import jobmaster

HERE = BENCH_DIR / "async_peers"
DRIVER = HERE / "driver.py"
PEERS = ("arq", "taskiq", "saq", "dramatiq")
SYSTEMS = ("jobmaster-async", "jobmaster-threads", *PEERS)
WORKLOADS = ("sleep", "http", "memory")
# Installed by bench/peers.py's installer, which reads peers.PACKAGES: ours
# are added there under their venv's name. aiohttp: the async jobs' client.
PACKAGES = {
    "async-arq": ["arq", "redis", "psutil", "aiohttp"],
    "async-saq": ["saq[redis]", "redis", "psutil", "aiohttp"],
    "async-taskiq": ["taskiq", "taskiq-redis", "redis", "psutil", "aiohttp"],
    "async-dramatiq": ["dramatiq[redis]", "redis", "psutil", "aiohttp"],
}
MODULES = {  # what a venv must import to be reused
    "arq": "arq, redis, psutil, aiohttp",
    "saq": "saq, redis, psutil, aiohttp",
    "taskiq": "taskiq, taskiq_redis, redis, psutil, aiohttp",
    "dramatiq": "dramatiq, redis, psutil, aiohttp",
}
HTTP_READY_S = 10.0
MEMORY_HOLD_S = 600.0  # the memory measure's jobs sleep this long (stopped well before)
MEMORY_WAIT_S = 120.0
HEARTBEAT_WAIT_S = 15.0


# -- venvs ------------------------------------------------------------------------
def prepare_env(peer: str, args: argparse.Namespace) -> Env:
    """The peer's venv: reused if it imports, else (re)built unless --skip-install."""
    if peer == "jobmaster":
        return Env(peer, Path(sys.executable), {"status": "this venv"})
    key = f"async-{peer}"
    home = args.cache_dir / key
    python = home / "bin" / "python"
    if args.fresh and not args.skip_install:
        shutil.rmtree(home, ignore_errors=True)
    if (
        python.exists()
        and peers.run_quiet([str(python), "-c", f"import {MODULES[peer]}"], 120).returncode == 0
    ):
        return Env(peer, python, {"status": "reused", "venv": str(home)})
    if args.skip_install:
        return Env(peer, None, {"status": "not installed (--skip-install)", "venv": str(home)})
    peers.PACKAGES.update(PACKAGES)
    env = peers.install(key, home, args.python3)
    return Env(peer, env.python, env.install)


def missing_in_this_venv(loops: list[str]) -> list[str]:
    """What the jobmaster columns need in this venv and it lacks."""
    wanted = ["aiohttp"] + (["uvloop"] if "uvloop" in loops else [])
    out = []
    for module in wanted:
        try:
            __import__(module)
        except ImportError:
            out.append(module)
    return out


# -- columns ----------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One column of the table: a venv, the driver's system and its options."""

    name: str
    peer: str  # the venv
    system: str  # the driver's SYSTEM
    options: tuple[str, ...] = ()
    is_async_jobmaster: bool = False


def columns_of(args: argparse.Namespace) -> list[Column]:
    out = []
    for name in args.systems:
        if name == "jobmaster-async":
            extra = ("--async-concurrency", str(args.async_concurrency))
            extra = extra if args.async_concurrency else ()
            for loop in args.loops:
                options = ("--mode", "async", "--loop", loop, *extra)
                out.append(
                    Column(f"jobmaster-async[{loop}]", "jobmaster", "jobmaster", options, True)
                )
        elif name == "jobmaster-threads":
            options = ("--mode", "threads", "--threads", str(args.threads))
            out.append(Column(name, "jobmaster", "jobmaster", options))
        else:
            out.append(Column(name, name, name))
    return out


# -- the HTTP server --------------------------------------------------------------
@contextlib.contextmanager
def http_server(tmp: Path) -> Any:
    """bench/async_peers/http_server.py on a free loopback port: (url, pid)."""
    port = free_port()
    loop = "uvloop" if not missing_in_this_venv(["uvloop"]) else "asyncio"
    log = (tmp / "http_server.log").open("wb")
    command = [sys.executable, str(HERE / "http_server.py"), "--port", str(port), "--loop", loop]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        if not proctree.wait_until(lambda: answers(port) or proc.poll() is not None, HTTP_READY_S):
            raise RuntimeError(f"the HTTP server did not answer in {HTTP_READY_S:g}s")
        if proc.poll() is not None:
            raise RuntimeError(f"the HTTP server exited: {proc.returncode}")
        yield url, proc.pid, loop
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def answers(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


# -- machine load -----------------------------------------------------------------
def load1() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(args: argparse.Namespace) -> dict[str, Any]:
    """Wait (up to ``--load-wait`` s) for the 1-minute load to fall to ``--max-load``."""
    started, before = time.monotonic(), load1()
    if args.max_load <= 0:
        return {"load_at_start": before, "waited_s": 0.0}
    while load1() > args.max_load and time.monotonic() - started < args.load_wait:
        print(f"bench: load {load1():.2f} > {args.max_load:g}, waiting", file=sys.stderr)
        time.sleep(10)
    if load1() > args.max_load:
        raise SystemExit(f"bench: load still {load1():.2f} after {args.load_wait:g}s: not run")
    return {
        "load_seen_first": before,
        "load_at_start": load1(),
        "waited_s": time.monotonic() - started,
    }


# -- drivers ----------------------------------------------------------------------
def driver_command(
    env: Env, column: Column, workload: str, url: str, http: tuple[str, int], workdir: Path,
    args: argparse.Namespace,
) -> list[str]:  # fmt: skip
    assert env.python is not None
    return [
        str(env.python), str(DRIVER), column.system, workload, "--json",
        "--redis-url", url, "--workdir", str(workdir),
        "--http-url", http[0], "--http-pid", str(http[1]),
        "--jobs", str(args.jobs), "--dramatiq-threads", str(args.dramatiq_threads),
        "--log-level", args.jobmaster_log_level,
        "--stop-deadline", str(args.stop_deadline), "--deadline", str(args.deadline),
        *column.options,
    ]  # fmt: skip


def run_driver(
    env: Env, column: Column, workload: str, url: str, http: tuple[str, int], workdir: Path,
    run_id: str, args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    """One driver run; its JSON, or why there is none (bench/peers.py's way)."""
    workdir.mkdir(parents=True, exist_ok=True)
    command = driver_command(env, column, workload, url, http, workdir, args)
    budget = 2 * args.deadline + 2 * args.stop_deadline + 120
    started, load_before = time.monotonic(), load1()
    with (workdir / "driver.log").open("wb") as stderr:
        proc = subprocess.Popen(
            command,
            cwd=DRIVER.parent,
            env=peers.driver_environment(url, run_id),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            stdout, _ = proc.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            stop_driver(proc)
            return {"ok": False, "error": f"driver timed out after {budget:g}s"}
        finally:
            if proc.poll() is None:
                stop_driver(proc)
    result = parse_output(stdout, workdir / "driver.log")
    result.update(driver_s=time.monotonic() - started, load_before=load_before, load_after=load1())
    return result


# -- memory -----------------------------------------------------------------------
def memory_of(pid: int) -> dict[str, float]:
    info = psutil.Process(pid).memory_full_info()
    return {"uss_mib": info.uss / 2**20, "rss_mib": info.rss / 2**20}


def measure_memory(url: str, tmp: Path, loop: str, args: argparse.Namespace) -> dict[str, Any]:
    """One child idle (after one async job), then holding ``--memory-jobs`` async
    jobs in flight: its USS and RSS both times."""
    if str(HERE) not in sys.path:  # amarks' and marks' key names
        sys.path[:0] = [str(HERE), str(BENCH_DIR / "peers")]
    import amarks

    conn = redis.Redis.from_url(url)
    conn.flushall()
    count = args.memory_jobs
    directory = tmp / f"memory-{loop}"
    directory.mkdir(parents=True, exist_ok=True)
    config = write_config(
        directory, url, app=["async_jobmaster_app"], processes=1, async_concurrency=count,
        async_loop=loop, log_level="warning", shutdown_timeout=1,
    )  # fmt: skip
    path = os.pathsep.join([str(HERE), str(BENCH_DIR / "peers")])
    master = Master(config, url, directory / "master.log", env={"PYTHONPATH": path})
    client = jobmaster.Client(url)
    out: dict[str, Any] = {"loop": loop, "jobs": count, "load_before": load1()}
    try:
        with master.running(f"memory[{loop}]"):
            master.wait_children(1)
            client.push_bulk({"job": "async_jobmaster_app.apid", "args": [[]]})
            if not proctree.wait_until(lambda: conn.get(amarks.PID_KEY), 60, 0.05):
                raise RuntimeError("the child ran no async job in 60 s")
            # The child is the process that ran it (not whatever the master's
            # children looked like while it started).
            child = int(conn.get(amarks.PID_KEY) or 0)
            time.sleep(1.0)  # settled after its first job
            out["idle"] = memory_of(child)
            started = time.monotonic()
            client.push_bulk(
                {"job": "async_jobmaster_app.ahold", "args": [[MEMORY_HOLD_S]] * count}
            )

            def all_running() -> bool:
                return int(conn.get(amarks.STARTED_KEY) or 0) >= count

            if not proctree.wait_until(all_running, MEMORY_WAIT_S, 0.05):
                seen = int(conn.get(amarks.STARTED_KEY) or 0)
                raise RuntimeError(f"{seen} of {count} jobs running after {MEMORY_WAIT_S:g}s")
            out["all_running_after_s"] = time.monotonic() - started
            time.sleep(1.0)  # the last ones past their first await
            out["busy"] = memory_of(child)
            out["same_child"] = child in master.children()
            out["child_pid"] = child
            out["running_seen"] = int(conn.get(amarks.STARTED_KEY) or 0)
            # jobmaster's own view comes with the child's next heartbeat (seconds).
            proctree.wait_until(
                lambda: jobmaster_counts(client)[0] == count, HEARTBEAT_WAIT_S, 0.25
            )
            out["jobmaster_busy"], out["jobmaster_failed"] = jobmaster_counts(client)
    except Exception as error:  # reported; the other figures stand
        return {**out, "ok": False, "error": f"{type(error).__name__}: {error}"}
    finally:
        conn.close()
    for unit in ("uss", "rss"):
        extra = out["busy"][f"{unit}_mib"] - out["idle"][f"{unit}_mib"]
        out[f"{unit}_added_mib"] = extra
        out[f"{unit}_kib_per_job"] = extra * 1024 / count
    out["load_after"] = load1()
    return {**out, "ok": True}


def jobmaster_counts(client: jobmaster.Client) -> tuple[int | str, int | str]:
    """jobmaster's own count of running jobs (``jobmaster stats``'s busy: the
    children's last heartbeats, so it may lag), beside the jobs' own count, and
    of failed attempts (none expected: a job that failed to start and waits for
    its retry is not in flight)."""
    from jobmaster.api import Stats

    try:
        stats = Stats(client)
        return int(stats.busy), int(stats.failed)
    except Exception as error:  # a cross-check only
        return f"{type(error).__name__}: {error}", "?"


# -- the run ----------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    columns = columns_of(args)
    envs = {peer: prepare_env(peer, args) for peer in {c.peer: None for c in columns}}
    lacking = missing_in_this_venv(args.loops if "jobmaster-async" in args.systems else [])
    if lacking and any(c.peer == "jobmaster" for c in columns):
        raise SystemExit(f"bench: this venv lacks {lacking}: pip install {' '.join(lacking)}")
    results: dict[str, Any] = {
        c.name: {"install": envs[c.peer].install, "options": list(c.options), "runs": []}
        for c in columns
    }
    for column in columns:
        if envs[column.peer].python is None:
            print(f"bench: {column.name}: {envs[column.peer].install['status']}", file=sys.stderr)
    load = wait_for_quiet(args)
    run_id = uuid.uuid4().hex
    timed = [w for w in args.workloads if w != "memory"]
    memory: dict[str, Any] = {}
    with private_redis(prefix="jobmaster-async-peers-", keep=args.keep_logs) as (tmp, server):
        conn = server.client()
        machine = machine_info(conn)
        try:
            with http_server(tmp) as (http_url, http_pid, http_loop):
                for index in range(args.runs if timed else 0):
                    for column in run_order(columns, index):
                        env, http = envs[column.peer], (http_url, http_pid)
                        where = (server.url, http, tmp, run_id)
                        out = measure_column(column, env, index, timed, where, args)
                        results[column.name]["runs"].append(out)
                    print(f"bench: run {index + 1}/{args.runs} done", file=sys.stderr)
            if "memory" in args.workloads:
                for loop in args.loops:
                    print(f"bench: memory [{loop}]...", file=sys.stderr)
                    memory[loop] = measure_memory(server.url, tmp, loop, args)
        finally:
            left = proctree.kill_marked(proctree.RUN_MARK, run_id)
            if left:
                print(f"bench: killed {len(left)} leftover process(es): {left}", file=sys.stderr)
    return {
        "machine": {**machine, "python3": python3_version(args.python3), **load},
        "jobmaster_commit": jobmaster_commit(),
        "http_server": {"loop": http_loop},
        "config": config_of(args),
        "systems": results,
        "memory": memory,
        **summarize(results),
    }


def measure_column(
    column: Column,
    env: Env,
    index: int,
    workloads: list[str],
    where: tuple[str, tuple[str, int], Path, str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One run of one column: each timed workload, after a FLUSHALL.
    ``where``: the Redis URL, the HTTP server (url, pid), the temp dir, the run id."""
    url, http, tmp, run_id = where
    out: dict[str, Any] = {}
    if env.python is None:
        return out
    conn = redis.Redis.from_url(url)
    for workload in workloads:
        conn.flushall()
        print(f"bench: run {index + 1}: {column.name} {workload}...", file=sys.stderr)
        workdir = tmp / f"run{index + 1}" / column.name / workload
        result = run_driver(env, column, workload, url, http, workdir, run_id, args)
        if not result.get("ok"):
            print(f"bench: {column.name} {workload} failed: {result.get('error')}", file=sys.stderr)
        out[workload] = result
    conn.close()
    return out


def jobmaster_commit() -> str | None:
    """The commit of the jobmaster that ran (its checkout's HEAD, + if modified)."""
    where = str(Path(jobmaster.__file__).resolve().parent)
    head = peers.run_quiet(["git", "-C", where, "rev-parse", "--short", "HEAD"], 30)
    if head.returncode != 0:
        return None
    dirty = peers.run_quiet(["git", "-C", where, "status", "--porcelain", "--", "."], 30)
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


# -- main -------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--systems", type=csv_list(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--workloads", type=csv_list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument(
        "--loops",
        type=csv_list(("uvloop", "asyncio")),
        default=["uvloop", "asyncio"],
        help="jobmaster's async_loop: a jobmaster-async column (and memory measure) for each",
    )
    parser.add_argument("--runs", type=int, default=3, help="each column measured in each run")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per workload")
    parser.add_argument("--threads", type=int, default=8, help="jobmaster-threads' concurrency")
    parser.add_argument("--dramatiq-threads", type=int, default=100, help="dramatiq -t")
    parser.add_argument("--async-concurrency", type=int, default=None, help="default: 100")
    parser.add_argument("--memory-jobs", type=int, default=1000, help="async jobs in flight")
    parser.add_argument("--jobmaster-log-level", default="info", help="info: the default")
    parser.add_argument("--max-load", type=float, default=2.0, help="0: do not wait")
    parser.add_argument("--load-wait", type=float, default=300.0)
    parser.add_argument("--stop-deadline", type=float, default=60.0)
    parser.add_argument("--deadline", type=float, default=300.0, help="enqueue and drain bound")
    parser.add_argument(
        "--cache-dir", type=Path, default=Path.home() / ".cache/jobmaster-bench/venvs"
    )
    parser.add_argument("--python3", default=shutil.which("python3") or "python3")
    parser.add_argument("--fresh", action="store_true", help="rebuild the peers' venvs")
    parser.add_argument("--skip-install", action="store_true", help="use existing venvs only")
    parser.add_argument("--no-table", action="store_true", help="JSON on stdout only")
    parser.add_argument("--keep-logs", action="store_true", help="keep the workers' logs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    exit_on_term()
    report = run(args)
    if not args.no_table:
        print_table(report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
