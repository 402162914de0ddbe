"""Benchmark: log lines from many threads of one process, through jobmaster's logging.

    .venv/bin/python bench/log_lines.py [--threads 10] [--lines 20000] [--rounds 5]
        [--format text|json] [--to pipe|file]

Never run by pytest. ``throughput.py`` at ``--log-level info`` shows what
the per-job lines cost a whole worker, but on a shared machine its figures
swing by a third run to run. This takes the lines alone: ``--threads``
threads each log ``--lines`` job-like lines (``jobmaster.worker.executor``,
a jid, job, queue and event, as ``job.done``) through the handler that
``setup_logging`` installs, onto a pipe that ``cat`` drains to /dev/null
(a service's stdout under systemd or docker) or onto a file (``--to file``,
as throughput.py's master log). Prints, per round, the lines per second
and the process's CPU per line (``time.process_time``, every thread's):
the minimum over rounds is the figure to compare, A/B against another
checkout run alternately (``PYTHONPATH=<checkout>``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import IO

from jobmaster.log import set_process_fields, setup_logging

EXTRA = {
    "jid": "3f1c0a7be9d24c5a8e6b2d10",
    "job": "bench_jobs.noop",
    "queue": "default",
    "event": "job.done",
    "duration_ms": 0.123,
}


@contextlib.contextmanager
def output(to: str) -> Iterator[IO[str]]:
    """A text stream over a pipe that ``cat`` drains, or over a temporary file."""
    if to == "file":
        with tempfile.TemporaryFile("w") as stream:
            yield stream
        return
    reader = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert reader.stdin is not None
    stream = open(reader.stdin.fileno(), "w", closefd=False)  # noqa: SIM115
    try:
        yield stream
    finally:
        stream.close()
        reader.stdin.close()
        reader.wait(timeout=60)


def log_to(stream: IO[str], log_format: str) -> None:
    """Logging as ``jobmaster run`` sets it up, onto ``stream`` instead of stdout."""
    stdout = sys.stdout
    sys.stdout = stream
    try:
        setup_logging("info", log_format)
    finally:
        sys.stdout = stdout


def one_round(threads: int, lines: int) -> tuple[float, float]:
    """(lines per second, CPU microseconds per line) of every thread logging ``lines``."""
    log = logging.getLogger("jobmaster.worker.executor")
    start = threading.Barrier(threads + 1)

    def flood() -> None:
        start.wait()
        for n in range(lines):
            log.info("done in %.1f ms", n / 1000, extra=EXTRA)

    workers = [threading.Thread(target=flood) for _ in range(threads)]
    for worker in workers:
        worker.start()
    cpu, wall = time.process_time(), time.perf_counter()
    start.wait()
    for worker in workers:
        worker.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    total = threads * lines
    return total / wall, cpu / total * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--lines", type=int, default=20_000, help="lines per thread per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--format", default="text", choices=["text", "json"])
    parser.add_argument("--to", default="pipe", choices=["pipe", "file"])
    args = parser.parse_args(argv)
    set_process_fields(child=1)
    with output(args.to) as stream:
        log_to(stream, args.format)
        handler = type(logging.getLogger().handlers[0]).__name__
        one_round(args.threads, 1_000)  # warm
        rounds = [one_round(args.threads, args.lines) for _ in range(args.rounds)]
        logging.getLogger().handlers.clear()
    rates = sorted(rate for rate, _ in rounds)
    cpus = sorted(cpu for _, cpu in rounds)
    print(
        json.dumps(
            {
                "handler": handler,
                "config": vars(args),
                "lines_per_s_max": rates[-1],
                "lines_per_s_median": rates[len(rates) // 2],
                "cpu_us_per_line_min": cpus[0],
                "cpu_us_per_line_median": cpus[len(cpus) // 2],
                "rounds": rounds,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
