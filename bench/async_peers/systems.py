"""One adapter per column of bench/async_peers.py: how its driver enqueues and starts workers.

Each imports its own library lazily (in ``__init__``), since a driver runs
inside one system's venv, where the others are not installed. They build on
bench/peers/adapters.py's ``Adapter`` (its ``versions()``), and write out the
enqueue call and worker command they use, which the bench's JSON copies, so
a reader can check each is the system's documented, ordinary way.

A workload is ``sleep`` or ``http``; each system has one job per workload,
taking the number of jobs queued (see amarks.py).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from adapters import Adapter  # bench/peers/adapters.py

HERE = Path(__file__).resolve().parent
ENQUEUE_BATCH = 100  # async producers: this many enqueues awaited at once


class System(Adapter):
    """A column: ``enqueue(workload, count, deadline)`` and its worker command."""

    concurrent_api = "n/a"  # bench/peers' producers measure is not run here

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        super().__init__(url)
        self.options = options

    def versions(self) -> dict[str, str]:
        out = super().versions()
        for extra in ("aiohttp", "uvloop"):  # the jobs' client; a faster loop, if present
            try:
                out[extra] = importlib.metadata.version(extra)
            except importlib.metadata.PackageNotFoundError:
                out[extra] = "none"
        return out

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        raise NotImplementedError

    def enqueue(self, workload: str, count: int, deadline: float) -> int:
        """``count`` jobs of ``workload``, each given ``count``, until ``deadline``."""
        raise NotImplementedError


class AsyncProducer(System):
    """A peer whose producer is async: enqueues awaited ``ENQUEUE_BATCH`` at a
    time on one event loop (an async web server's requests share one loop)."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        super().__init__(url, options)
        self.loop = asyncio.new_event_loop()

    def send(self, workload: str, count: int) -> Awaitable[Any]:
        raise NotImplementedError

    def enqueue(self, workload: str, count: int, deadline: float) -> int:
        async def run() -> int:
            done = 0
            while done < count and time.monotonic() < deadline:
                batch = min(ENQUEUE_BATCH, count - done)
                await asyncio.gather(*(self.send(workload, count) for _ in range(batch)))
                done += batch
            return done

        return self.loop.run_until_complete(run())


class Jobmaster(System):
    """``jobmaster -c jobmaster.toml``: ``processes = 2``; the async column
    with ``async_loop`` as asked and the other settings default, the threads
    column with ``concurrency = --threads``."""

    name = "jobmaster"
    package = "jobmaster"
    single_api = "job.enqueue(count)  (one call after the other)"

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        super().__init__(url, options)
        import async_jobmaster_app

        import jobmaster

        jobmaster.configure(url)
        self.app = async_jobmaster_app
        self.threads_mode = options["mode"] == "threads"
        self.log_level = options.get("log_level", "info")
        extra = (
            f"concurrency {options['threads']} (threads run the plain def jobs)"
            if self.threads_mode
            else f"async_loop {options['loop']}, async_concurrency "
            f"{options.get('async_concurrency') or '100 (default)'}, concurrency 5 (default)"
        )
        self.notes = f"{extra}; log_level {self.log_level} (info, the default, logs 2 lines a job)"

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        lines = [
            f'redis_url = "{self.url}"',
            'app = ["async_jobmaster_app"]',
            "processes = 2",
            f'log_level = "{self.log_level}"',
            f'data_dir = "{workdir / "data"}"',
        ]
        if self.threads_mode:
            lines.append(f"concurrency = {threads}")
        else:
            lines.append(f'async_loop = "{self.options["loop"]}"')
            if self.options.get("async_concurrency"):
                lines.append(f"async_concurrency = {self.options['async_concurrency']}")
        config = workdir / "jobmaster.toml"
        config.write_text("\n".join(lines) + "\n")
        return [str(bin_dir / "jobmaster"), "-c", str(config), "--redis-url", self.url]

    def enqueue(self, workload: str, count: int, deadline: float) -> int:
        names = {"sleep": "sleep", "http": "http_get"}
        name = names[workload] if self.threads_mode else "a" + workload
        job = getattr(self.app, name)
        done = 0
        while done < count and time.monotonic() < deadline:
            job.enqueue(count)
            done += 1
        return done


class Arq(AsyncProducer):
    name = "arq"
    package = "arq"
    single_api = "await pool.enqueue_job(name, count)  (arq.create_pool)"
    notes = (
        "arq's worker is one process: bench/async_peers/launch.py starts 2; "
        "max_jobs 100 per process (arq's default is 10); other settings default"
    )

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        super().__init__(url, options)
        from arq import create_pool
        from arq.connections import RedisSettings

        self.pool = self.loop.run_until_complete(create_pool(RedisSettings.from_dsn(url)))

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        launch = [str(bin_dir / "python"), str(HERE / "launch.py"), "2", "--"]
        return [*launch, str(bin_dir / "arq"), "async_arq_app.WorkerSettings"]

    def send(self, workload: str, count: int) -> Awaitable[Any]:
        return self.pool.enqueue_job("a" + workload, count)


class Saq(AsyncProducer):
    name = "saq"
    package = "saq"
    single_api = "await queue.enqueue(name, count=count)"
    notes = (
        "saq --workers 2 (jobs run in its main process and one forked); "
        "concurrency 100 per process (SAQ's default is 10); other settings default"
    )

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        super().__init__(url, options)
        import async_saq_app

        self.queue = async_saq_app.queue
        self.loop.run_until_complete(self.queue.connect())

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        return [str(bin_dir / "saq"), "async_saq_app.settings", "--workers", "2"]

    def send(self, workload: str, count: int) -> Awaitable[Any]:
        return self.queue.enqueue("a" + workload, count=count)


class Taskiq(AsyncProducer):
    name = "taskiq"
    package = "taskiq"
    single_api = "await task.kiq(count)"
    notes = (
        "taskiq-redis RedisStreamBroker (acknowledges); taskiq worker -w 2 with its "
        "defaults (--max-async-tasks 100)"
    )

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        super().__init__(url, options)
        import async_taskiq_app

        self.app = async_taskiq_app
        # The stream's consumer group is made here, at the stream's end: what is
        # queued after this is what the workers read (as bench/peers does).
        self.loop.run_until_complete(async_taskiq_app.broker.startup())

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "taskiq-redis": importlib.metadata.version("taskiq-redis")}

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        return [str(bin_dir / "taskiq"), "worker", "-w", "2", "async_taskiq_app:broker"]

    def send(self, workload: str, count: int) -> Awaitable[Any]:
        return getattr(self.app, "a" + workload).kiq(count)


class Dramatiq(System):
    name = "dramatiq"
    package = "dramatiq"
    single_api = "actor.send(count)  (one call after the other)"

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        super().__init__(url, options)
        import async_dramatiq_app

        self.app = async_dramatiq_app
        self.threads = int(options["dramatiq_threads"])
        self.notes = (
            f"AsyncIO middleware, async def actors; -p 2 -t {self.threads}: a worker "
            "thread waits on each coroutine, so -t bounds the jobs in flight per "
            "process (Dramatiq's default is 8)"
        )

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        command = [str(bin_dir / "dramatiq"), "-p", "2", "-t", str(self.threads)]
        return [*command, "async_dramatiq_app"]

    def enqueue(self, workload: str, count: int, deadline: float) -> int:
        actor = getattr(self.app, "a" + workload)
        done = 0
        while done < count and time.monotonic() < deadline:
            actor.send(count)
            done += 1
        return done


SYSTEMS: dict[str, Callable[[str, dict[str, Any]], System]] = {
    "jobmaster": Jobmaster,
    "arq": Arq,
    "saq": Saq,
    "taskiq": Taskiq,
    "dramatiq": Dramatiq,
}
