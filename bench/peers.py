"""Benchmark: jobmaster beside Dramatiq, Huey, taskiq, Celery and RQ, on one private Redis.

This is a benchmark, not a test: it asserts nothing and is never run by pytest.

    cd bench && ../.venv/bin/python peers.py [--peers dramatiq,huey,taskiq,celery,rq]
        [--only enqueue,bulk,producers,throughput,failover,shutdown] [--runs 3]
        [--jobs 20000] [--enqueue-jobs 5000] [--bulk-jobs 50000]
        [--producers 16] [--producer-jobs 16000] [--threads 8]
        [--rounds 3] [--failover-wait 60] [--deadline 600]
        [--jobmaster-log-level info] [--jobmaster-extra-levels warning]
        [--taskiq-broker stream|list]
        [--skip-install | --fresh] [--cache-dir DIR] [--no-jobmaster] [--no-table]

Each peer is installed from PyPI into a venv of its own, made with the
machine's ``python3`` under ``~/.cache/jobmaster-bench/venvs/<peer>`` and
reused on later runs (``--fresh`` rebuilds it, ``--skip-install`` only uses
what is there): ``dramatiq[redis]``, ``huey``, ``taskiq`` with
``taskiq-redis``, ``celery[redis]`` and ``rq``, each with ``redis`` and
``psutil`` (no hiredis unless the peer pulls it in: the JSON's versions say
which venv has it). jobmaster itself runs from the venv running this script.
One private ``redis-server`` (a free loopback port, no persistence; the shared
one on 6379 is never touched) serves every peer in turn, with a FLUSHALL
before each measure.

Every measure runs inside the peer's own venv: ``<venv>/bin/python
bench/peers/driver.py PEER MEASURE --json`` enqueues with the peer's library,
starts its documented multi-process worker with 2 processes, and prints one
JSON object. The jobs (bench/peers/<peer>_app.py, and rq_jobs.py) all call
the same bodies (bench/peers/marks.py): ``noop`` INCRs ``bench:peers:done``
(the one Redis command it adds to every job, for every peer alike: how the
bench knows jobs ran), ``hold`` records its start (time, pid), runs until a
stop key or its duration, and records its end. The worker commands:

- jobmaster: ``jobmaster -c jobmaster.toml`` (``processes = 2``,
  ``concurrency = --threads``, ``log_level`` as below, other settings
  default). The ``jobmaster`` column runs at ``--jobmaster-log-level``
  (info, its default, which logs each job's start and end); each of
  ``--jobmaster-extra-levels`` (default: warning, which logs no line a job,
  as Dramatiq at its default) adds a ``jobmaster@<level>`` column measured
  by ``throughput`` only, the one measure a log level changes;
- Dramatiq: ``dramatiq -p 2 -t <--threads> dramatiq_app`` (RedisBroker);
- Huey: ``huey_consumer -k process -w 2 huey_app.huey`` (RedisHuey);
- taskiq: ``taskiq worker -w 2 taskiq_app:broker`` (taskiq-redis
  ``RedisStreamBroker``, the acknowledging one its README shows first;
  ``--taskiq-broker list`` for ``ListQueueBroker``), ``async def`` tasks;
- Celery: ``celery -A celery_app worker --pool prefork -c 2 -l INFO``;
- RQ: ``rq worker-pool -n 2 -u URL default``.

The measures (``--only``):

- **enqueue**: one client, ``--enqueue-jobs`` no-ops through the single
  enqueue call, and as many bare redis-py PINGs on a client of the same
  venv (the round-trip floor), after 100 untimed of each, in alternated
  halves (PING, enqueue, PING, enqueue). taskiq's enqueue is ``await
  noop.kiq()`` in one event loop. The driver checks the queue holds them all.
- **bulk**: ``--bulk-jobs`` no-ops through the bulk call where the peer has
  one (jobmaster ``push_bulk``; RQ ``enqueue_many`` in batches of 1,000);
  Dramatiq, Huey, taskiq and Celery have none: "n/a".
- **producers**: ``--producers`` producers of one process enqueue
  ``--producer-jobs`` no-ops between them, released together (threads on
  one shared client; for taskiq, whose producer is async, as many
  coroutines on one event loop). The queue is counted afterwards: a
  producer that raised or lost jobs gets no rate ("unsafe", "jobs missing").
- **throughput**: ``--jobs`` no-ops queued through the single enqueue, then
  the pool started and ``bench:peers:done`` read every 20 ms: jobs/s from
  the Popen to the last job ("from start", start-up included) and from the
  first job seen done to the last ("first to last"). Over that same first
  to last window, the CPU per job of the pool's whole process tree (psutil:
  user + system of each live process, plus what each has reaped from its
  children, so RQ's work horses count) and of the Redis server process.
  Over enqueue and drain, Redis's commands per job (INFO commandstats,
  which counts those run by Lua scripts too, less the bench's own GETs and
  INFOs), also split into enqueue and drain. A peer that has not drained
  by ``--deadline`` gets a partial rate.
- **failover**, ``--rounds`` times, each with a fresh pool: a ``hold`` job
  started, the process that runs it (the pid it recorded; for RQ the work
  horse forked for the job, the pool's grandchild) SIGKILLed, then polled
  every 5 ms for its second start, up to ``--failover-wait`` seconds. A pool
  whose master exits meanwhile is started again at once (as systemd's
  ``Restart=always`` would). A job that did not run again is "failed" (the
  peer recorded it so), "stuck in <keys>" (still in Redis) or "lost".
- **shutdown**: SIGTERM to the pool's main process when idle (seconds to
  exit), then with 2 ``hold`` jobs of ``--shutdown-job-s`` running: seconds
  to exit, and each job completed, or not, in which case a fresh pool is
  started to see whether it runs again (requeued) or failed, stuck or lost.
  SIGTERM for all, as systemd and container runtimes send: for Huey, whose
  graceful signal is SIGINT, it means "interrupt the running tasks".

``--runs`` times (default 3), every system is measured with every measure
asked for, each run starting one system further down the list, so none is
always first or last; failover and shutdown run in the first run only
(their rounds repeat them). Each peer runs with its defaults (Celery's
early acknowledgement, RQ without ``Retry``, Dramatiq's 60 s heartbeat
timeout, taskiq's 10 min ``idle_timeout``...): what a user gets untuned.

Output: one JSON object with everything (versions, commands, every run's
values, their medians, the targets) on stdout; a table of the medians on
stderr (``--no-table`` to omit it): a column per system, then issue 25's
targets, each ratio of jobmaster's median to the best peer's marked MET or
missed: throughput >= 2x the fastest peer at warning and >= 1.5x at the
defaults; worker-tree and Redis CPU per job <= 0.5x the best peer's; Redis
commands per job <= Dramatiq's; single enqueue >= 1.2x the fastest peer or
>= 90 % of its own PING floor; 16 producers >= 3x the fastest peer;
``push_bulk`` >= 50,000 jobs/s. The machine is small and may be shared:
compare the columns of one run, not figures across runs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import redis
from harness import BENCH_DIR, exit_on_term, free_port, log_tail, machine_info
from peers_report import print_table, summarize

from jobmaster.embedded import RedisServerProcess

PEERS = ("dramatiq", "huey", "taskiq", "celery", "rq")
PACKAGES = {  # psutil: the drivers measure the worker tree's CPU with it
    "dramatiq": ["dramatiq[redis]", "redis", "psutil"],
    "huey": ["huey", "redis", "psutil"],
    "taskiq": ["taskiq", "taskiq-redis", "redis", "psutil"],
    "celery": ["celery[redis]", "redis", "psutil"],
    "rq": ["rq", "redis", "psutil"],
}
MEASURES = ("enqueue", "bulk", "producers", "throughput", "failover", "shutdown")
ONCE = ("failover", "shutdown")  # measured in the first run only: their rounds repeat them
DRIVER = BENCH_DIR / "peers" / "driver.py"
INSTALL_TIMEOUT = 900.0
DRIVER_TERM_GRACE = 20.0  # a timed-out driver gets this long to stop its pools


def load_proctree() -> ModuleType:
    """bench/peers/proctree.py, shared with the drivers (which cannot import
    harness); loaded by path since ``peers`` here names this very script."""
    spec = importlib.util.spec_from_file_location("proctree", BENCH_DIR / "peers" / "proctree.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


proctree = load_proctree()


# -- venvs ------------------------------------------------------------------------
@dataclass
class Env:
    """Where one system's driver runs, and how that venv came to be."""

    peer: str
    python: Path | None
    install: dict[str, Any] = field(default_factory=dict)


def run_quiet(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def importable(python: Path, peer: str) -> bool:
    if not python.exists():
        return False
    modules = f"{peer}, redis, psutil" + (", taskiq_redis" if peer == "taskiq" else "")
    return run_quiet([str(python), "-c", f"import {modules}"], 120).returncode == 0


def prepare_env(peer: str, args: argparse.Namespace) -> Env:
    """The peer's venv: reused if it imports, else (re)built unless --skip-install."""
    if peer == "jobmaster":
        return Env(peer, Path(sys.executable), {"status": "this venv"})
    home = args.cache_dir / peer
    python = home / "bin" / "python"
    if args.fresh and not args.skip_install:
        shutil.rmtree(home, ignore_errors=True)
    if importable(python, peer):
        return Env(peer, python, {"status": "reused", "venv": str(home)})
    if args.skip_install:
        return Env(peer, None, {"status": "not installed (--skip-install)", "venv": str(home)})
    return install(peer, home, args.python3)


def install(peer: str, home: Path, python3: str) -> Env:
    shutil.rmtree(home, ignore_errors=True)
    python = home / "bin" / "python"
    commands = [
        [python3, "-m", "venv", str(home)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"] + PACKAGES[peer],
    ]
    started = time.monotonic()
    info: dict[str, Any] = {"venv": str(home), "commands": [" ".join(c) for c in commands]}
    print(f"bench: installing {peer} into {home}", file=sys.stderr)
    for command in commands:
        try:
            done = run_quiet(command, INSTALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            return Env(peer, None, {**info, "status": f"install timed out: {command[-1]}"})
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            return Env(peer, None, {**info, "status": "install failed", "output": tail})
    info.update(status="installed", seconds=time.monotonic() - started)
    return Env(peer, python, info)


# -- systems ----------------------------------------------------------------------
@dataclass(frozen=True)
class System:
    """One column: a peer's venv and adapter, and what to measure with it.

    jobmaster gets one column per log level: ``jobmaster`` at
    ``--jobmaster-log-level`` with every measure, and ``jobmaster@<level>``
    for each of ``--jobmaster-extra-levels`` with the throughput measure only
    (the only one a log level changes).
    """

    name: str
    peer: str
    log_level: str = "info"
    measures: tuple[str, ...] = MEASURES


def systems_of(args: argparse.Namespace) -> list[System]:
    out = []
    if not args.no_jobmaster:
        out.append(System("jobmaster", "jobmaster", args.jobmaster_log_level))
        for level in args.jobmaster_extra_levels:
            if level != args.jobmaster_log_level:
                out.append(System(f"jobmaster@{level}", "jobmaster", level, ("throughput",)))
    return out + [System(peer, peer) for peer in args.peers]


def run_order(systems: list[System], index: int) -> list[System]:
    """Run ``index`` starts one system further on, so that no system is always
    measured first (right after the venvs are built) or last."""
    shift = index % len(systems) if systems else 0
    return systems[shift:] + systems[:shift]


# -- drivers ----------------------------------------------------------------------
def driver_budget(measure: str, args: argparse.Namespace) -> float:
    """The outer bound on one driver run: its own inner deadlines, generously."""
    stop = 2 * args.stop_deadline
    return float(
        {
            "enqueue": 2 * args.deadline + 120,
            "bulk": args.deadline + 120,
            "producers": args.deadline + 120,
            "throughput": 2 * args.deadline + stop + 120,
            "failover": args.rounds * (150 + args.failover_wait + stop) + 60,
            "shutdown": 300 + args.failover_wait + 2 * stop,
        }[measure]
    )


def driver_command(
    env: Env, measure: str, url: str, workdir: Path, args: argparse.Namespace
) -> list[str]:
    assert env.python is not None
    return [
        str(env.python), str(DRIVER), env.peer, measure, "--json",
        "--redis-url", url, "--workdir", str(workdir),
        "--jobs", str(args.jobs), "--enqueue-jobs", str(args.enqueue_jobs),
        "--bulk-jobs", str(args.bulk_jobs), "--producers", str(args.producers),
        "--producer-jobs", str(args.producer_jobs),
        "--threads", str(args.threads), "--rounds", str(args.rounds),
        "--failover-wait", str(args.failover_wait),
        "--shutdown-job-s", str(args.shutdown_job_s),
        "--stop-deadline", str(args.stop_deadline), "--deadline", str(args.deadline),
    ]  # fmt: skip


def driver_environment(
    url: str, run_id: str, log_level: str = "info", taskiq_broker: str = "stream"
) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("JOBMASTER_") and k != "REDIS_URL"
    }
    env.pop("PYTHONPATH", None)  # the driver's own directory is its path; nothing of ours
    env.update({"BENCH_REDIS_URL": url, proctree.RUN_MARK: run_id})
    env["BENCH_JOBMASTER_LOG_LEVEL"] = log_level  # read by adapters.Jobmaster
    env["BENCH_TASKIQ_BROKER"] = taskiq_broker  # read by taskiq_app
    return env


def run_driver(
    env: Env,
    measure: str,
    url: str,
    workdir: Path,
    run_id: str,
    args: argparse.Namespace,
    log_level: str = "info",
) -> dict[str, Any]:
    """One driver run; its JSON, or why there is none. On a timeout the driver
    gets SIGTERM (its ``finally`` stops its pools), then SIGKILL."""
    workdir.mkdir(parents=True, exist_ok=True)
    command = driver_command(env, measure, url, workdir, args)
    budget = driver_budget(measure, args)
    errors = workdir / "driver.log"
    started = time.monotonic()
    with errors.open("wb") as stderr:
        proc = subprocess.Popen(
            command,
            cwd=DRIVER.parent,
            env=driver_environment(url, run_id, log_level, args.taskiq_broker),
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
    result = parse_output(stdout, errors)
    result["driver_s"] = time.monotonic() - started
    return result


def stop_driver(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=DRIVER_TERM_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def parse_output(stdout: bytes, errors: Path) -> dict[str, Any]:
    lines = [line for line in stdout.decode(errors="replace").splitlines() if line.strip()]
    try:
        return dict(json.loads(lines[-1]))
    except (IndexError, ValueError):
        return {"ok": False, "error": "no JSON from the driver", "driver_log": log_tail(errors)}


# -- the run ----------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    systems = systems_of(args)
    envs = {peer: prepare_env(peer, args) for peer in {s.peer: None for s in systems}}
    tmp = Path(tempfile.mkdtemp(prefix="jobmaster-peers-"))
    server = RedisServerProcess(tmp / "redis", port=free_port(), appendonly=False)
    run_id = uuid.uuid4().hex
    results: dict[str, Any] = {
        s.name: {"install": envs[s.peer].install, "log_level": s.log_level, "runs": []}
        for s in systems
    }
    for system in systems:
        if envs[system.peer].python is None:
            print(f"bench: {system.name}: {envs[system.peer].install['status']}", file=sys.stderr)
    try:
        server.start()
        conn = server.client()
        machine = machine_info(conn)
        for index in range(args.runs):
            for system in run_order(systems, index):
                results[system.name]["runs"].append(
                    measure_system(system, envs[system.peer], index, server.url, tmp, run_id, args)
                )
            print(f"bench: run {index + 1}/{args.runs} done", file=sys.stderr)
    finally:
        left = proctree.kill_marked(proctree.RUN_MARK, run_id)
        if left:
            print(f"bench: killed {len(left)} leftover process(es): {left}", file=sys.stderr)
        server.stop()
        if args.keep_logs:
            print(f"bench: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return {
        "machine": {**machine, "python3": python3_version(args.python3)},
        "config": config_of(args),
        "systems": results,
        **summarize(results),
    }


def measure_system(
    system: System,
    env: Env,
    index: int,
    url: str,
    tmp: Path,
    run_id: str,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One run of one system: each measure asked for, after a FLUSHALL of the
    private Redis; the failover and shutdown measures in the first run only."""
    out: dict[str, Any] = {}
    if env.python is None:
        return out
    conn = redis.Redis.from_url(url)
    for measure in args.only:
        if measure not in system.measures or (index > 0 and measure in ONCE):
            continue
        conn.flushall()
        print(f"bench: run {index + 1}: {system.name} {measure}...", file=sys.stderr)
        workdir = tmp / f"run{index + 1}" / system.name / measure
        result = run_driver(env, measure, url, workdir, run_id, args, system.log_level)
        if not result.get("ok"):
            print(f"bench: {system.name} {measure} failed: {result.get('error')}", file=sys.stderr)
        out[measure] = result
    conn.close()
    return out


def python3_version(python3: str) -> str:
    done = run_quiet([python3, "--version"], 30)
    return f"{python3}: {(done.stdout or done.stderr).strip()}"


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("peers", "only", "runs", "jobs", "enqueue_jobs", "bulk_jobs", "producers")
    extra = ("producer_jobs", "threads", "rounds", "failover_wait", "shutdown_job_s")
    extra += ("stop_deadline", "deadline", "cache_dir", "python3", "taskiq_broker")
    extra += ("jobmaster_log_level", "jobmaster_extra_levels")
    return {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k in keys + extra
    }


# -- main -------------------------------------------------------------------------
def csv_list(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    """An argparse type for a comma-separated subset of ``allowed``."""

    def parse(value: str) -> list[str]:
        items = [v.strip() for v in value.split(",") if v.strip()]
        unknown = [v for v in items if v not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {allowed}")
        return items

    return parse


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--peers", type=csv_list(PEERS), default=list(PEERS))
    parser.add_argument("--only", type=csv_list(MEASURES), default=list(MEASURES))
    parser.add_argument("--runs", type=int, default=3, help="each system measured in each run")
    parser.add_argument("--jobs", type=int, default=20_000, help="throughput jobs")
    parser.add_argument("--enqueue-jobs", type=int, default=5_000, help="single enqueues, PINGs")
    parser.add_argument("--bulk-jobs", type=int, default=50_000)
    parser.add_argument("--producers", type=int, default=16, help="concurrent producers")
    parser.add_argument("--producer-jobs", type=int, default=16_000, help="all producers' jobs")
    parser.add_argument("--threads", type=int, default=8, help="jobmaster concurrency, dramatiq -t")
    parser.add_argument("--rounds", type=int, default=3, help="failover kills")
    parser.add_argument("--failover-wait", type=float, default=60.0)
    parser.add_argument("--shutdown-job-s", type=float, default=5.0)
    parser.add_argument("--stop-deadline", type=float, default=60.0, help="SIGTERM, then SIGKILL")
    parser.add_argument("--deadline", type=float, default=600.0, help="bound on enqueue and drain")
    parser.add_argument(
        "--cache-dir", type=Path, default=Path.home() / ".cache/jobmaster-bench/venvs"
    )
    parser.add_argument("--python3", default=shutil.which("python3") or "python3")
    parser.add_argument("--fresh", action="store_true", help="rebuild the peers' venvs")
    parser.add_argument("--skip-install", action="store_true", help="use existing venvs only")
    parser.add_argument("--no-jobmaster", action="store_true")
    parser.add_argument(
        "--jobmaster-log-level",
        default="info",
        help="the jobmaster column's log_level: info (its default) logs two lines a job; "
        "warning logs none, as Dramatiq at its default",
    )
    parser.add_argument(
        "--jobmaster-extra-levels",
        type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
        default=["warning"],
        help="more jobmaster columns, throughput only, one per log_level ('' for none)",
    )
    parser.add_argument(
        "--taskiq-broker",
        choices=("stream", "list"),
        default="stream",
        help="taskiq-redis RedisStreamBroker (acknowledged) or ListQueueBroker",
    )
    parser.add_argument("--no-table", action="store_true", help="JSON on stdout only")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the drivers' and workers' logs"
    )
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
