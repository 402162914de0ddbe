"""One measure of one system, run by that system's own venv python.

    <venv>/bin/python bench/peers/driver.py PEER MEASURE --redis-url URL --workdir DIR --json

bench/peers.py runs this once per (peer, measure), after a FLUSHALL of its
private Redis, and reads the one JSON object it prints on stdout (its log
goes to stderr). It imports only the standard library, redis-py, the peer's
library and the modules beside it, since the peer's venv holds nothing else.
The measures are described in bench/peers.py. The worker pools it starts are
stopped in ``finally``; anything they forked carries an environment marker,
so nothing is left behind even by a peer that orphans its processes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cpu
import marks
import redis
from adapters import ADAPTERS, Adapter, adapter, describe, worker_environment
from proctree import RUN_MARK, WorkerPool, children, descendants, exit_on_term, wait_until

READY_TIMEOUT = 60.0  # a pool's first job done (covers interpreter start and imports)
START_TIMEOUT = 30.0  # a hold job's start mark after its enqueue
POLL_S = 0.005  # failover polling: the figures are in ms
DRAIN_POLL_S = 0.02  # throughput polling: one GET per poll
# The bound on a stop that is not itself measured (after a drain, between
# failover rounds): a peer whose idle workers do not exit on TERM (taskiq's
# wait on a read that never comes) costs this, not --stop-deadline, each time.
TEARDOWN_STOP_S = 10.0


@dataclass
class Context:
    """What every measure works with, and the pools it must stop."""

    args: argparse.Namespace
    conn: redis.Redis
    peer: Adapter
    workdir: Path
    pools: list[WorkerPool] = field(default_factory=list)

    def new_pool(self) -> WorkerPool:
        """A worker pool (not started) with its own log and marker."""
        index = len(self.pools) + 1
        tag = f"{os.environ.get(RUN_MARK, uuid.uuid4().hex)}:{self.peer.name}:{index}"
        bin_dir = Path(sys.executable).parent
        command = self.peer.worker_command(bin_dir, self.args.threads, self.workdir)
        env = worker_environment(self.args.redis_url)
        pool = WorkerPool(command, env, self.workdir, self.workdir / f"worker-{index}.log", tag)
        self.pools.append(pool)
        return pool

    def cleanup(self) -> None:
        for pool in self.pools:
            pool.cleanup()

    def log_tail(self) -> str:
        return self.pools[-1].log_tail() if self.pools else "(no worker started)"


# -- helpers --------------------------------------------------------------------
def done_count(conn: redis.Redis) -> int:
    return int(conn.get(marks.DONE_KEY) or 0)


def start_ready(ctx: Context) -> WorkerPool:
    """Start a pool and wait until it has its 2 processes and has run a no-op
    (so what follows measures the peer at work, not its start-up)."""
    ctx.conn.delete(marks.DONE_KEY)
    pool = ctx.new_pool()
    pool.start()
    ctx.peer.enqueue_noop()
    if not wait_until(lambda: not pool.running() or done_count(ctx.conn) >= 1, READY_TIMEOUT):
        raise RuntimeError(f"no job done {READY_TIMEOUT:g}s after start:\n{pool.log_tail()}")
    if not wait_until(lambda: not pool.running() or len(children(pool.pid)) >= 2, READY_TIMEOUT):
        raise RuntimeError(f"never 2 worker processes:\n{pool.log_tail()}")
    if not pool.running():
        raise RuntimeError(f"worker exited ({pool.returncode()}):\n{pool.log_tail()}")
    ctx.conn.delete(marks.DONE_KEY)
    return pool


def start_mark(conn: redis.Redis, token: str, index: int) -> dict[str, Any] | None:
    raw = conn.lindex(marks.started_key(token), index)
    return None if raw is None else dict(json.loads(raw))


def wait_started(ctx: Context, tokens: list[str]) -> list[dict[str, Any]]:
    def all_started() -> bool:
        return all(ctx.conn.llen(marks.started_key(t)) for t in tokens)

    if not wait_until(all_started, START_TIMEOUT):
        raise RuntimeError(f"hold job(s) not started in {START_TIMEOUT:g}s:\n{ctx.log_tail()}")
    return [start_mark(ctx.conn, t, 0) or {} for t in tokens]


def locate(conn: redis.Redis, needles: list[str]) -> list[str]:
    """Keys (other than the bench's own) whose name or value holds a needle:
    where a job that did not run again is kept, if anywhere. A full scan is
    fine on the private server, which holds a handful of keys here."""
    wanted = [n.encode() for n in needles]
    found = []
    for key in conn.scan_iter(count=1000):
        if key.startswith(marks.PREFIX.encode()):
            continue
        blob = key + b"\0" + b"\0".join(key_values(conn, key))
        if any(n in blob for n in wanted):
            found.append(key.decode(errors="replace"))
    return sorted(found)


def key_values(conn: redis.Redis, key: bytes) -> list[bytes]:
    kind = conn.type(key).decode()
    readers: dict[str, Callable[[], list[bytes]]] = {
        "string": lambda: [conn.get(key) or b""],
        "list": lambda: list(conn.lrange(key, 0, -1)),
        "stream": lambda: [v for _, f in conn.xrange(key) for v in f.values()],
        "set": lambda: list(conn.smembers(key)),
        "zset": lambda: list(conn.zrange(key, 0, -1)),
        "hash": lambda: [b for pair in conn.hgetall(key).items() for b in pair],
    }
    return readers.get(kind, list)()


def verdict(ctx: Context, job_id: str, token: str) -> str:
    """For a job that did not run again: failed (the peer says so), stuck
    (still somewhere in Redis) or lost (nowhere)."""
    gave_up = ctx.peer.gave_up(job_id)
    if gave_up:
        return f"failed ({gave_up})"
    keys = locate(ctx.conn, [job_id, token])
    return f"stuck in {', '.join(keys)}" if keys else "lost (in no Redis key)"


def rate(count: int, seconds: float | None) -> float | None:
    return count / seconds if seconds else None


# -- enqueue --------------------------------------------------------------------
def measure_enqueue(ctx: Context) -> dict[str, Any]:
    """``--enqueue-jobs`` single enqueues from one client, and as many bare PINGs
    (redis-py, the client every peer here uses, in this venv) in the same run:
    the round-trip floor. Both after 100 untimed calls, in two halves each,
    alternated (PING, enqueue, PING, enqueue), so a burst of other load on the
    machine falls on both."""
    count, bound = ctx.args.enqueue_jobs, ctx.args.deadline
    ping = redis.Redis.from_url(ctx.args.redis_url)
    for _ in range(100):  # connections opened, scripts loaded, imports warm
        ping.ping()
    ctx.peer.enqueue_loop(100, time.monotonic() + bound)
    ping_s = single_s = 0.0
    pings = done = 0
    for half in (count // 2, count - count // 2):
        started = time.monotonic()
        for _ in range(half):
            ping.ping()
        ping_s += time.monotonic() - started
        pings += half
        started = time.monotonic()
        done += ctx.peer.enqueue_loop(half, started + bound)
        single_s += time.monotonic() - started
    return {
        "single": {
            "api": ctx.peer.single_api,
            "jobs": done,
            "seconds": single_s,
            "jobs_per_s": rate(done, single_s),
        },
        "ping": {"calls": pings, "seconds": ping_s, "per_s": rate(pings, ping_s)},
        "backlog": ctx.peer.backlog(),
        "backlog_expected": 100 + done,  # all of them really queued
    }


def measure_bulk(ctx: Context) -> dict[str, Any]:
    """``--bulk-jobs`` no-ops through the peer's bulk call, if it has one."""
    if not ctx.peer.bulk_api:
        return {"bulk": {"api": None}}
    count = ctx.args.bulk_jobs
    ctx.peer.enqueue_noop_bulk(100)  # scripts loaded, imports warm
    started = time.monotonic()
    ctx.peer.enqueue_noop_bulk(count)
    seconds = time.monotonic() - started
    return {
        "bulk": {
            "api": ctx.peer.bulk_api,
            "jobs": count,
            "seconds": seconds,
            "jobs_per_s": rate(count, seconds),
        },
        "backlog": ctx.peer.backlog(),
        "backlog_expected": 100 + count,
    }


def measure_producers(ctx: Context) -> dict[str, Any]:
    """``--producers`` producers of this one process enqueue ``--producer-jobs``
    no-ops between them, at once (a threaded web server's requests). The
    queue is counted afterwards: a producer that is not thread-safe shows as
    errors or as jobs missing."""
    producers = ctx.args.producers
    each = max(1, ctx.args.producer_jobs // producers)
    seconds, errors = ctx.peer.enqueue_concurrent(producers, each)
    jobs = producers * each
    backlog, expected = ctx.peer.backlog(), producers * (10 + each)
    sound = not errors and backlog == expected
    return {
        "concurrent": {
            "api": ctx.peer.concurrent_api.replace("N ", f"{producers} ", 1),
            "producers": producers,
            "jobs": jobs,
            "seconds": seconds,
            # Only a run that queued every job, without an error, has a rate.
            "jobs_per_s": rate(jobs, seconds) if sound else None,
            "errors": len(errors),
            "first_errors": sorted(set(errors))[:3],
        },
        "backlog": backlog,
        "backlog_expected": expected,
    }


# -- throughput -----------------------------------------------------------------
class Counter:
    """Redis's own count of the commands it ran (``INFO commandstats``, which
    counts those run by Lua scripts too, with the script call itself), less
    the INFO calls that read it."""

    def __init__(self, conn: redis.Redis) -> None:
        self.conn = conn
        self.infos = 0  # INFO calls made so far (each is counted by the next one)

    def read(self) -> int:
        total = sum(int(v["calls"]) for v in self.conn.info("commandstats").values())
        self.infos += 1
        return total - (self.infos - 1)


def redis_pid(conn: redis.Redis) -> int:
    return int(conn.info("server")["process_id"])


def measure_throughput(ctx: Context) -> dict[str, Any]:
    """N no-ops queued by the single enqueue, then a 2-process pool started:
    the time to drain them, the CPU its process tree and Redis spent on it,
    and the Redis commands per job over enqueue and drain together."""
    count = ctx.args.jobs
    ctx.conn.delete(marks.DONE_KEY)
    counter = Counter(ctx.conn)
    calls_start = counter.read()
    started = time.monotonic()
    queued = ctx.peer.enqueue_loop(count, started + ctx.args.deadline)
    enqueue_s = time.monotonic() - started
    calls_enqueue = counter.read() - calls_start
    backlog = ctx.peer.backlog()
    calls_before = counter.read()
    pool = ctx.new_pool()
    pool.start()
    drained = drain(ctx, pool, queued, redis_pid(ctx.conn))
    calls_drain = counter.read() - calls_before - drained.pop("polls")  # our GETs
    stop = pool.terminate(min(ctx.args.stop_deadline, TEARDOWN_STOP_S))
    done = max(1, drained["done"])  # a partial drain: per job done so far
    return {
        "jobs": queued,
        "queued_before_start": backlog,
        "prefill_s": enqueue_s,
        "prefill_api": ctx.peer.single_api,
        "command": pool.command,
        **drained,
        "redis_calls_enqueue_per_job": calls_enqueue / queued,
        "redis_calls_drain_per_job": calls_drain / done,
        "redis_calls_per_job": calls_enqueue / queued + calls_drain / done,
        "backlog_after": ctx.peer.backlog(),
        "stop": stop,
    }


def drain(ctx: Context, pool: WorkerPool, count: int, server_pid: int) -> dict[str, Any]:
    """Poll the done counter until it reaches ``count`` (or the deadline); the
    CPU of the pool's tree and of Redis from the first job seen done to the last."""
    first: tuple[float, int, float, float] | None = None  # time, done, tree CPU, Redis CPU
    value, polls, finished_at = 0, 0, None
    while time.monotonic() - pool.started_at < ctx.args.deadline:
        value = done_count(ctx.conn)
        polls += 1
        now = time.monotonic()
        if value and first is None:
            first = (now, value, cpu.tree_cpu(pool.pid), cpu.pid_cpu(server_pid))
        if value >= count:
            finished_at = now
            break
        if not pool.running():
            raise RuntimeError(f"worker exited ({pool.returncode()}):\n{pool.log_tail()}")
        time.sleep(DRAIN_POLL_S)
    tree_end, redis_end = cpu.tree_cpu(pool.pid), cpu.pid_cpu(server_pid)
    result: dict[str, Any] = {"done": value, "drained": finished_at is not None, "polls": polls}
    if first is None:
        result["partial_jobs_per_s"] = 0.0
        return result
    jobs = value - first[1]
    cpu_figures = {
        "cpu_jobs": jobs,
        "worker_cpu_s": tree_end - first[2],
        "redis_cpu_s": redis_end - first[3],
        "worker_cpu_us_per_job": (tree_end - first[2]) / jobs * 1e6 if jobs else None,
        "redis_cpu_us_per_job": (redis_end - first[3]) / jobs * 1e6 if jobs else None,
    }
    if finished_at is None:
        # Not drained by the deadline: the rate so far, so a slow peer still has a
        # figure; its CPU and commands per job are over the jobs done so far.
        elapsed = time.monotonic() - first[0]
        return {**result, "partial_jobs_per_s": rate(jobs, elapsed), **cpu_figures}
    from_start = finished_at - pool.started_at
    first_to_last = finished_at - first[0]
    return {
        **result,
        "first_job_after_s": first[0] - pool.started_at,
        "from_start_s": from_start,
        "from_start_jobs_per_s": rate(count, from_start),
        "first_to_last_s": first_to_last,
        "first_to_last_jobs_per_s": rate(jobs, first_to_last),
        **cpu_figures,
    }


# -- failover -------------------------------------------------------------------
def measure_failover(ctx: Context) -> dict[str, Any]:
    """``--rounds`` kills; a round that fails (a fresh pool that never runs its
    first job) is recorded as such, and the rounds after it still run."""
    rounds = []
    for index in range(1, ctx.args.rounds + 1):
        try:
            rounds.append(failover_round(ctx, index))
        except RuntimeError as error:
            rounds.append({"round": index, "error": str(error), "outcome": "error"})
            for pool in ctx.pools:
                pool.cleanup()
    return {"command": ctx.pools[0].command if ctx.pools else None, "rounds": rounds}


def failover_round(ctx: Context, index: int) -> dict[str, Any]:
    """SIGKILL the process running a long job; how long until it runs again."""
    pool = start_ready(ctx)
    token = uuid.uuid4().hex
    job_id = ctx.peer.enqueue_hold(token, ctx.args.failover_wait + 30)
    mark = wait_started(ctx, [token])[0]
    victim = int(mark["pid"])
    depth = descendants(pool.pid).get(victim)
    if depth is None:
        raise RuntimeError(f"round {index}: the job's pid {victim} is not in the worker's tree")
    before = children(pool.pid)
    t_kill = time.time()
    os.kill(victim, signal.SIGKILL)
    seen = watch_after_kill(ctx, pool, job_id, token, t_kill, before if depth == 1 else None)
    ctx.conn.set(marks.stop_key(token), 1)
    if seen["restart_ms"] is None:
        seen["outcome"] = seen.pop("gave_up", None) or verdict(ctx, job_id, token)
    else:
        seen["outcome"] = "ran again"
    seen.pop("gave_up", None)
    for running in ctx.pools:
        if running.running():
            running.terminate(min(ctx.args.stop_deadline, TEARDOWN_STOP_S))
    return {"round": index, "job_id": job_id, "killed_pid": victim, "depth": depth, **seen}


def watch_after_kill(
    ctx: Context,
    pool: WorkerPool,
    job_id: str,
    token: str,
    t_kill: float,
    before: set[int] | None,
) -> dict[str, Any]:
    """Poll every 5 ms for the job's second start, the killed process's
    replacement (only a direct child has one) and the pool's own exit, until
    the first two are seen or ``--failover-wait`` has passed. A pool
    that exits is started again at once, as systemd's ``Restart=always``
    would, so a peer whose master gives up still gets its chance to recover."""
    out: dict[str, Any] = {"restart_ms": None, "replacement_ms": None, "pool_exit_ms": None}
    deadline = time.monotonic() + ctx.args.failover_wait
    next_check = 0.0
    while time.monotonic() < deadline:
        elapsed_ms = (time.time() - t_kill) * 1000
        if out["restart_ms"] is None and (second := start_mark(ctx.conn, token, 1)):
            out["restart_ms"] = (second["t"] - t_kill) * 1000
        if out["restart_ms"] is not None and (before is None or out["replacement_ms"] is not None):
            break
        if before is not None and out["replacement_ms"] is None and children(pool.pid) - before:
            out["replacement_ms"] = elapsed_ms
        if out["pool_exit_ms"] is None and not pool.running():
            out.update(pool_exit_ms=elapsed_ms, pool_exit_code=pool.returncode())
            ctx.new_pool().start()
        if time.monotonic() >= next_check:  # the peer's own "failed" record, twice a second
            next_check = time.monotonic() + 0.5
            if gave_up := ctx.peer.gave_up(job_id):
                out["gave_up"] = f"failed ({gave_up})"
                break
        time.sleep(POLL_S)
    return out


# -- shutdown -------------------------------------------------------------------
def measure_shutdown(ctx: Context) -> dict[str, Any]:
    pool = start_ready(ctx)
    time.sleep(1.0)  # every process settled in its idle wait, not still starting
    idle = pool.terminate(ctx.args.stop_deadline)
    return {"command": pool.command, "idle": idle, "busy": busy_shutdown(ctx)}


def busy_shutdown(ctx: Context) -> dict[str, Any]:
    """SIGTERM while 2 jobs of ``--shutdown-job-s`` run; then what became of them."""
    seconds = ctx.args.shutdown_job_s
    pool = start_ready(ctx)
    tokens = [uuid.uuid4().hex for _ in range(2)]
    ids = [ctx.peer.enqueue_hold(t, seconds) for t in tokens]
    starts = wait_started(ctx, tokens)
    t_term = time.time()
    stop = pool.terminate(ctx.args.stop_deadline)
    jobs = [
        {"job_id": i, "left_at_term_s": seconds - (t_term - s["t"])}
        for i, s in zip(ids, starts, strict=True)
    ]
    for job, token in zip(jobs, tokens, strict=True):
        job["finished"] = bool(ctx.conn.llen(marks.finished_key(token)))
        job["where_after_exit"] = locate(ctx.conn, [job["job_id"], token])
    follow_unfinished(ctx, jobs, tokens)
    return {**stop, "jobs": jobs}


def follow_unfinished(ctx: Context, jobs: list[dict[str, Any]], tokens: list[str]) -> None:
    """Start a fresh pool: a job that was pushed back runs again (requeued);
    otherwise it failed, is stuck, or is lost."""
    for job in jobs:
        if job["finished"]:
            job["outcome"] = "completed"
    pending = [(j, t) for j, t in zip(jobs, tokens, strict=True) if not j["finished"]]
    if not pending:
        return
    ctx.new_pool().start()
    restarted = time.monotonic()

    def all_rerun() -> bool:
        return all(ctx.conn.llen(marks.started_key(t)) >= 2 for _, t in pending)

    wait_until(all_rerun, ctx.args.failover_wait, 0.05)
    for job, token in pending:
        if ctx.conn.llen(marks.started_key(token)) >= 2:
            job["outcome"] = "requeued (ran again after a restart)"
            job["rerun_after_restart_s"] = time.monotonic() - restarted
        else:
            job["outcome"] = verdict(ctx, job["job_id"], token)
        ctx.conn.set(marks.stop_key(token), 1)


MEASURES: dict[str, Callable[[Context], dict[str, Any]]] = {
    "enqueue": measure_enqueue,
    "bulk": measure_bulk,
    "producers": measure_producers,
    "throughput": measure_throughput,
    "failover": measure_failover,
    "shutdown": measure_shutdown,
}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("peer", choices=sorted(ADAPTERS))
    parser.add_argument("measure", choices=sorted(MEASURES))
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--json", action="store_true", help="(the output is always JSON)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--enqueue-jobs", type=int, default=5_000)
    parser.add_argument("--bulk-jobs", type=int, default=50_000)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--producer-jobs", type=int, default=16_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--failover-wait", type=float, default=60.0)
    parser.add_argument("--shutdown-job-s", type=float, default=5.0)
    parser.add_argument("--stop-deadline", type=float, default=60.0)
    parser.add_argument("--deadline", type=float, default=600.0, help="enqueue and drain bound")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    exit_on_term()
    os.environ["BENCH_REDIS_URL"] = args.redis_url  # the job modules read it on import
    args.workdir.mkdir(parents=True, exist_ok=True)
    conn = redis.Redis.from_url(args.redis_url, socket_timeout=30)
    ctx: Context | None = None
    try:
        ctx = Context(args, conn, adapter(args.peer, args.redis_url), args.workdir)
        out: dict[str, Any] = {"ok": True, **describe(ctx.peer), **MEASURES[args.measure](ctx)}
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
