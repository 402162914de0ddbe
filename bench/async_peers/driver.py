"""One workload of one system, run by that system's own venv python.

    <venv>/bin/python bench/async_peers/driver.py SYSTEM WORKLOAD --redis-url URL
        --workdir DIR --http-url URL [--mode async|threads] [--loop uvloop|asyncio] --json

bench/async_peers.py runs this once per (column, workload, run), after a
FLUSHALL of its private Redis, and reads the one JSON object it prints on
stdout. It is bench/peers/driver.py's throughput measure with other jobs:
that driver's pieces are imported from it (its Context, the command Counter,
the drain that polls the done counter and reads the pool's CPU), as are
bench/peers' process helpers. ``--jobs`` jobs of the workload are queued
first, then the 2-process pool is started; the figures are described in
bench/async_peers.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS_DIR = HERE.parent / "peers"
sys.path.insert(1, str(PEERS_DIR))  # after this directory: cpu, marks, proctree, adapters

import amarks  # noqa: E402
import cpu  # noqa: E402
import marks  # noqa: E402
import proctree  # noqa: E402
import redis  # noqa: E402
from adapters import describe  # noqa: E402
from systems import SYSTEMS  # noqa: E402

# The stop after a drain is not measured; idle SAQ and taskiq pools ignore TERM.
TEARDOWN_STOP_S = 3.0
FIRST_DONE_S = 60.0  # no job done this long after the start: the system does not run them


def load_peers_driver() -> ModuleType:
    """bench/peers/driver.py, by path (this file is a ``driver`` too)."""
    spec = importlib.util.spec_from_file_location("peers_driver", PEERS_DIR / "driver.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


peers_driver = load_peers_driver()


def window(conn: redis.Redis) -> dict[str, Any]:
    """The jobs' own marks: the earliest first start of a process, the last end."""
    firsts = [float(conn.get(key) or 0) for key in conn.scan_iter(amarks.FIRST_PREFIX + "*")]
    last = conn.get(amarks.LAST_KEY)
    if not firsts or last is None:
        return {"processes_seen": len(firsts)}
    return {
        "processes_seen": len(firsts),
        "first_start": min(firsts),
        "last_end": float(last),
        "window_s": float(last) - min(firsts),
    }


def wait_first_done(ctx: Any, pool: Any) -> int:
    """Until the first job is done (bench/peers' drain, which follows, would wait
    out its whole deadline for a system that runs none); the GETs it made."""
    polls = 0

    def first_done() -> bool:
        nonlocal polls
        polls += 1
        return not pool.running() or bool(peers_driver.done_count(ctx.conn))

    if not proctree.wait_until(first_done, FIRST_DONE_S, 0.005):
        # e.g. a jobmaster whose children take async jobs but cannot run them yet
        raise RuntimeError(f"no job done {FIRST_DONE_S:g}s after start:\n{pool.log_tail()}")
    return polls


def measure(ctx: Any, workload: str, http_pid: int | None) -> dict[str, Any]:
    """Queue ``--jobs`` jobs of ``workload``, start the pool, time its drain."""
    count, conn = ctx.args.jobs, ctx.conn
    conn.delete(marks.DONE_KEY)
    counter = peers_driver.Counter(conn)
    calls_start = counter.read()
    started = time.monotonic()
    queued = ctx.peer.enqueue(workload, count, started + ctx.args.deadline)
    enqueue_s = time.monotonic() - started
    calls_enqueue = counter.read() - calls_start
    calls_before = counter.read()
    http_before = cpu.pid_cpu(http_pid) if http_pid else None
    pool = ctx.new_pool()
    popen_at = time.time()
    pool.start()
    waits = wait_first_done(ctx, pool)
    drained = peers_driver.drain(ctx, pool, queued, peers_driver.redis_pid(conn))
    calls_drain = counter.read() - calls_before - drained.pop("polls") - waits  # our GETs
    http_after = cpu.pid_cpu(http_pid) if http_pid else None
    stop = pool.terminate(min(ctx.args.stop_deadline, TEARDOWN_STOP_S))
    done = max(1, drained["done"])
    marks_window = window(conn)
    out: dict[str, Any] = {
        "workload": workload,
        "jobs": queued,
        "enqueue_s": enqueue_s,
        "enqueue_api": ctx.peer.single_api,
        "command": pool.command,
        **drained,
        **marks_window,
        "redis_calls_enqueue_per_job": calls_enqueue / queued,
        "redis_calls_drain_per_job": calls_drain / done,
        "redis_calls_per_job": calls_enqueue / queued + calls_drain / done,
        "stop": stop,
    }
    if "window_s" in marks_window and drained["drained"]:
        out["jobs_per_s"] = queued / marks_window["window_s"]
        out["first_start_after_popen_s"] = marks_window["first_start"] - popen_at
    if ctx.peer.name == "jobmaster":  # the loop its children say they run on
        log = pool.logfile.read_text(errors="replace")
        out["event_loops_logged"] = sorted(set(re.findall(r"an event loop \((\w+)\)", log)))
    if http_before is not None and http_after is not None:
        out["http_server_cpu_us_per_job"] = (http_after - http_before) / done * 1e6
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("system", choices=sorted(SYSTEMS))
    parser.add_argument("workload", choices=("sleep", "http"))
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--http-url", required=True)
    parser.add_argument("--http-pid", type=int, default=None, help="its CPU is read too")
    parser.add_argument("--json", action="store_true", help="(the output is always JSON)")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--mode", choices=("async", "threads"), default="async")
    parser.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    parser.add_argument("--async-concurrency", type=int, default=None)
    parser.add_argument("--threads", type=int, default=8, help="jobmaster threads' concurrency")
    parser.add_argument("--dramatiq-threads", type=int, default=100)
    parser.add_argument("--log-level", default="info", help="jobmaster's log_level")
    parser.add_argument("--stop-deadline", type=float, default=60.0)
    parser.add_argument("--deadline", type=float, default=300.0, help="enqueue and drain bound")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    proctree.exit_on_term()
    # The workers inherit these (bench/peers' worker_environment keeps the
    # environment, puts bench/peers first on PYTHONPATH): our apps, the server.
    os.environ["PYTHONPATH"] = str(HERE)
    os.environ["BENCH_HTTP_URL"] = args.http_url
    os.environ["BENCH_REDIS_URL"] = args.redis_url
    args.workdir.mkdir(parents=True, exist_ok=True)
    conn = redis.Redis.from_url(args.redis_url, socket_timeout=30)
    options = {
        "mode": args.mode,
        "loop": args.loop,
        "async_concurrency": args.async_concurrency,
        "threads": args.threads,
        "dramatiq_threads": args.dramatiq_threads,
        "log_level": args.log_level,
    }
    ctx: Any = None
    try:
        system = SYSTEMS[args.system](args.redis_url, options)
        ctx = peers_driver.Context(args, conn, system, args.workdir)
        out: dict[str, Any] = {
            "ok": True,
            **describe(system),
            **measure(ctx, args.workload, args.http_pid),
        }
    except Exception as error:
        tail = ctx.log_tail() if ctx is not None else ""
        out = {"ok": False, "error": f"{type(error).__name__}: {error}", "worker_log": tail}
    finally:
        if ctx is not None:
            ctx.cleanup()
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
