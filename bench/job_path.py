"""Benchmark: the worker's own CPU per no-op job, one thread, Redis out of the way.

    .venv/bin/python bench/job_path.py [--jobs 20000] [--rounds 7] [--profile FILE]
        [--log-level warning|info] [--log-format text|json]

Never run by pytest. ``throughput.py`` measures the whole worker, and on a
shared machine its CPU per job swings by 10 % run to run: too much to see a
change of a few microseconds on the job's path. This takes the path alone,
``Processor.process`` of one claimed job (table start and end, the executor
with its Scope, conclude, record building FINISH's arguments, the metrics),
in this thread, over and over, with the FINISH round trip replaced by a
reply of 1 (``IOCore.call``), so neither Redis nor other threads are in the
figure. A private ``redis-server`` (harness.py) serves only the set-up.

Prints the CPU per job (``time.process_time``) of ``--rounds`` rounds of
``--jobs`` jobs: the minimum is the figure to compare (less noise can only
make a round faster), A/B against another checkout run alternately.
``--profile FILE``: one more round under cProfile, its stats written to FILE.
``--log-level info`` (the setting's default): the start and end line of each
job too, through jobmaster's own ``setup_logging``, into a file of the
temporary directory (the workers' stdout, as the master's log file in
throughput.py); ``warning`` (the default here) writes none.
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

import redis
from harness import exit_on_term, private_redis

import jobmaster
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.log import setup_logging
from jobmaster.worker.process import WorkerProcess
from jobmaster.worker.unit import Unit

JOB = "bench_jobs.noop"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", help="write one more round's cProfile stats here")
    parser.add_argument("--log-level", default="warning", choices=["warning", "info"])
    parser.add_argument("--log-format", default="text", choices=["text", "json"])
    args = parser.parse_args(argv)
    exit_on_term()
    import bench_jobs  # noqa: F401  (registers the job)

    with private_redis() as (tmp, server), (tmp / "job_path.log").open("w") as lines:
        log_to(lines, args.log_level, args.log_format)
        url = server.url
        jobmaster.Client(url).push_bulk({"job": JOB, "args": [[]]})
        keys = Keys("jobmaster")
        raw = redis.Redis.from_url(url).lindex(keys.queue("default"), 0)
        assert isinstance(raw, bytes), "the pushed job is not in its queue"
        config = Config(redis_url=url, app=["bench_jobs"], concurrency=10, log_level=args.log_level)
        worker = WorkerProcess(config)  # built, never started: no thread runs
        acks = worker.ctx.core

        def finished(
            script: Any, keys: Any, args: Any, *, settles: str | None = None, frees: Any = None
        ) -> int:
            if settles is not None:  # as IOCore.call: the "working" mark is moot
                acks._marks.pop(settles, None)
            return 1  # the payload was in the in-progress list

        acks.call = finished  # type: ignore[method-assign]
        acks._thread = object()  # type: ignore[assignment]  # no core thread: calls are stubbed
        table, processor = worker.manager.table, worker.manager.processors[0]
        unit = Unit(raw, "default")

        def run(jobs: int) -> None:
            for _ in range(jobs):
                table.claim(unit)
                processor.process(unit)

        run(2_000)  # warm
        per_job = []
        for _ in range(args.rounds):
            started = time.process_time()
            run(args.jobs)
            per_job.append((time.process_time() - started) / args.jobs * 1e6)
        per_job.sort()
        rounds = ", ".join(f"{us:.1f}" for us in per_job)
        print(f"CPU per job (us): min {per_job[0]:.1f}, median {per_job[len(per_job) // 2]:.1f}")
        print(f"rounds, sorted: {rounds}")
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(run, args.jobs)
            profile.dump_stats(args.profile)
    return 0


def log_to(stream: IO[str], level: str, log_format: str) -> None:
    """Logging as ``jobmaster run`` sets it up, onto ``stream`` instead of stdout
    (``setup_logging`` takes the stdout of the moment)."""
    stdout = sys.stdout
    sys.stdout = stream
    try:
        setup_logging(level, log_format)
    finally:
        sys.stdout = stdout


if __name__ == "__main__":
    raise SystemExit(main())
