"""Run the demo end to end: start `jobmaster -c demo.toml`, enqueue, watch, stop.

Usage (from anywhere): python contrib/examples/demo.py

It starts the worker as a subprocess (which starts its embedded Redis),
enqueues a few jobs with the same config (so the producer finds that
Redis), waits until the worker has processed them, then stops the worker
with SIGTERM, as a platform would, and prints the worker's log.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

import jobmaster

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "demo.toml"


def main() -> int:
    command = shutil.which("jobmaster", path=str(Path(sys.executable).parent)) or "jobmaster"
    env = {k: v for k, v in os.environ.items() if k not in ("JOBMASTER_REDIS_URL", "REDIS_URL")}
    worker = subprocess.Popen([command, "-c", str(CONFIG)], cwd=HERE, env=env)
    try:
        client = wait_for_redis()
        sys.path.insert(0, str(HERE))
        import demo_app

        stats = jobmaster.Stats(client)
        before = stats.processed  # the embedded Redis persists: count from here
        demo_app.greet.enqueue("world")
        demo_app.add.enqueue(2, 3)
        deadline = time.monotonic() + 30
        while stats.processed < before + 2:
            if time.monotonic() > deadline or worker.poll() is not None:
                print("demo: the jobs were not processed", file=sys.stderr)
                return 1
            time.sleep(0.05)
            stats.refresh()
        print("demo: both jobs processed; stopping the worker with SIGTERM")
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
    print(f"demo: jobmaster exited with {code}")
    return code


def wait_for_redis() -> jobmaster.Client:
    """The worker starts the embedded Redis; the producer waits until it answers."""
    client = jobmaster.configure(config=CONFIG)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.redis.ping()
            return client
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
