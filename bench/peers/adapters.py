"""One adapter per system: how the driver enqueues, starts workers and looks.

Each adapter imports its own library lazily (in ``__init__``), since a
driver runs inside one peer's venv, where the other peers are not
installed. What each one uses is written out in ``single_api``,
``bulk_api`` and the worker command, and copied into the bench's JSON, so
a reader can check that it is the peer's documented, ordinary way.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

QUEUE = "default"


class Adapter:
    """The interface, and what every adapter shares."""

    name = ""
    package = ""  # the distribution whose version is reported
    single_api = ""
    bulk_api: str | None = None  # None: the peer has no bulk enqueue
    # How many producers of one process enqueue at once: threads sharing the
    # peer's ordinary client, unless the adapter says otherwise.
    concurrent_api = "N threads, each calling the single enqueue on one shared client"
    notes = ""

    def __init__(self, url: str) -> None:
        self.url = url

    def versions(self) -> dict[str, str]:
        out = {p: importlib.metadata.version(p) for p in (self.package, "redis")}
        try:  # redis-py's C parser, when the venv has it: it changes the PING floor
            out["hiredis"] = importlib.metadata.version("hiredis")
        except importlib.metadata.PackageNotFoundError:
            out["hiredis"] = "none"
        return out

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        raise NotImplementedError

    def enqueue_noop(self) -> None:
        raise NotImplementedError

    def enqueue_loop(self, count: int, deadline: float) -> int:
        """Up to ``count`` single enqueues, one after the other, until the
        monotonic ``deadline``; how many were made."""
        done = 0
        while done < count and time.monotonic() < deadline:
            self.enqueue_noop()
            done += 1
        return done

    def enqueue_concurrent(self, producers: int, each: int) -> tuple[float, list[str]]:
        """``producers`` threads enqueue ``each`` no-ops apiece, all released
        at once after 10 untimed ones each (connections opened); the seconds
        from the release to the last one's end, and the errors raised."""
        errors: list[str] = []
        gate = threading.Barrier(producers + 1)

        def produce() -> None:
            try:
                for _ in range(10):
                    self.enqueue_noop()
                gate.wait()
                for _ in range(each):
                    self.enqueue_noop()
            except Exception as error:  # counted and reported: the producer is not safe
                errors.append(f"{type(error).__name__}: {error}")
                gate.abort()

        threads = [threading.Thread(target=produce, daemon=True) for _ in range(producers)]
        for thread in threads:
            thread.start()
        with contextlib.suppress(threading.BrokenBarrierError):  # a producer failed
            gate.wait()
        started = time.monotonic()
        for thread in threads:
            thread.join()
        return time.monotonic() - started, errors

    def enqueue_noop_bulk(self, count: int) -> None:
        raise NotImplementedError(f"{self.name} has no bulk enqueue")

    def enqueue_hold(self, token: str, seconds: float) -> str:
        """Enqueue ``hold(token, seconds)``; the peer's id for the job."""
        raise NotImplementedError

    def backlog(self) -> int:
        """Jobs waiting in the queue (not those being run)."""
        raise NotImplementedError

    def gave_up(self, job_id: str) -> str | None:
        """The peer's own record that the job failed for good, if it keeps one."""
        return None


def chunks(count: int, size: int = 1000) -> list[int]:
    """``count`` split into batches of at most ``size`` (bulk calls of bounded size)."""
    return [min(size, count - start) for start in range(0, count, size)]


class Jobmaster(Adapter):
    name = "jobmaster"
    package = "jobmaster"
    single_api = "noop.enqueue()"
    bulk_api = (
        'jobmaster.Client(url).push_bulk({"job": ..., "args": [[]] * N}) (1 round trip/1,000)'
    )

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import jobmaster_app

        import jobmaster

        self.app = jobmaster_app
        self.client = jobmaster.configure(url)
        self.log_level = os.environ.get("BENCH_JOBMASTER_LOG_LEVEL", "info")
        self.notes = (
            f"log_level {self.log_level} (info, the default, logs each job's start and end); "
            "shutdown_timeout 25 s (the default); TERM is the graceful stop"
        )

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        # The bench/harness.py way: a config file, plus the URL on the command line.
        config = workdir / "jobmaster.toml"
        config.write_text(
            f'redis_url = "{self.url}"\napp = ["jobmaster_app"]\nprocesses = 2\n'
            f'concurrency = {threads}\nlog_level = "{self.log_level}"\n'
            f'data_dir = "{workdir / "data"}"\n'
        )
        return [str(bin_dir / "jobmaster"), "-c", str(config), "--redis-url", self.url]

    def enqueue_noop(self) -> None:
        self.app.noop.enqueue()

    def enqueue_noop_bulk(self, count: int) -> None:
        self.client.push_bulk({"job": "jobmaster_app.noop", "args": [[]] * count})

    def enqueue_hold(self, token: str, seconds: float) -> str:
        return str(self.app.hold.enqueue(token, seconds))

    def backlog(self) -> int:
        return int(self.client.redis.llen(f"jobmaster:{{jobmaster}}:queue:{QUEUE}"))


class Dramatiq(Adapter):
    name = "dramatiq"
    package = "dramatiq"
    single_api = "noop.send()"
    notes = (
        "no bulk enqueue: group(...).run() sends its messages one by one; "
        "TERM is the graceful stop (--worker-shutdown-timeout, default 10 min); "
        "the master exits when a worker process dies; a dead worker's messages are "
        "requeued by another's maintenance (0.1% of its Redis commands) once its "
        "heartbeat is 60 s old"
    )

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import dramatiq_app

        self.app = dramatiq_app

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        return [str(bin_dir / "dramatiq"), "-p", "2", "-t", str(threads), "dramatiq_app"]

    def enqueue_noop(self) -> None:
        self.app.noop.send()

    def enqueue_hold(self, token: str, seconds: float) -> str:
        return str(self.app.hold.send(token, seconds).message_id)

    def backlog(self) -> int:
        return int(self.app.broker.client.llen(f"dramatiq:{QUEUE}"))


class Huey(Adapter):
    name = "huey"
    package = "huey"
    single_api = "noop()  (calling a @huey.task enqueues it)"
    notes = (
        "no bulk enqueue; TERM interrupts running tasks by default "
        "(INT is huey_consumer's graceful signal unless -g TERM)"
    )

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import huey_app

        self.app = huey_app

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        return [str(bin_dir / "huey_consumer"), "-k", "process", "-w", "2", "huey_app.huey"]

    def enqueue_noop(self) -> None:
        self.app.noop()

    def enqueue_hold(self, token: str, seconds: float) -> str:
        return str(self.app.hold(token, seconds).id)

    def backlog(self) -> int:
        return int(self.app.huey.pending_count())


class Celery(Adapter):
    name = "celery"
    package = "celery"
    single_api = "noop.delay()"
    notes = (
        "no bulk enqueue (group(...).apply_async() publishes one message per task); "
        "default early ack; TERM is the warm shutdown; its producer is not documented "
        "as thread-safe (celery/celery#4480 is open): the threads figure is checked "
        "by counting what was queued"
    )

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import celery_app

        self.app = celery_app
        self.redis = celery_app.app.broker_connection().default_channel.client

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        return [
            str(bin_dir / "celery"),
            "-A",
            "celery_app",
            "worker",
            "--pool",
            "prefork",
            "-c",
            "2",
            "-l",
            "INFO",
        ]

    def enqueue_noop(self) -> None:
        self.app.noop.delay()

    def enqueue_hold(self, token: str, seconds: float) -> str:
        return str(self.app.hold.delay(token, seconds).id)

    def backlog(self) -> int:
        return int(self.redis.llen("celery"))


class RQ(Adapter):
    name = "rq"
    package = "rq"
    single_api = "queue.enqueue(rq_jobs.noop)"
    bulk_api = "queue.enqueue_many([Queue.prepare_data(rq_jobs.noop)] * 1000) per 1,000"
    notes = (
        "each job runs in a work horse forked for it; the failover kills that horse; "
        "TERM is the warm shutdown"
    )

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import redis
        import rq
        import rq_jobs

        self.jobs = rq_jobs
        self.rq = rq
        self.redis = redis.Redis.from_url(url)
        self.queue = rq.Queue(QUEUE, connection=self.redis)

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        return [str(bin_dir / "rq"), "worker-pool", "-n", "2", "-u", self.url, QUEUE]

    def enqueue_noop(self) -> None:
        self.queue.enqueue(self.jobs.noop)

    def enqueue_noop_bulk(self, count: int) -> None:
        for size in chunks(count):
            data = [self.rq.Queue.prepare_data(self.jobs.noop) for _ in range(size)]
            self.queue.enqueue_many(data)

    def enqueue_hold(self, token: str, seconds: float) -> str:
        # RQ's default job timeout (180 s) could cut a long failover wait short.
        job = self.queue.enqueue(self.jobs.hold, token, seconds, job_timeout=int(seconds) + 60)
        return str(job.id)

    def backlog(self) -> int:
        return int(self.queue.count)

    def gave_up(self, job_id: str) -> str | None:
        job = self.rq.job.Job.fetch(job_id, connection=self.redis)
        status = str(job.get_status())
        if status.rsplit(".", 1)[-1].lower() not in {"failed", "stopped", "canceled"}:
            return None
        reason = (job.exc_info or "").strip().splitlines()
        return f"{status}: {reason[-1] if reason else 'no exc_info'}"


class Taskiq(Adapter):
    name = "taskiq"
    package = "taskiq"
    single_api = "await noop.kiq()  (in one asyncio loop, one call after the other)"
    concurrent_api = (
        "N coroutines on one event loop, each awaiting noop.kiq() (taskiq's producer "
        "is async: an async web server's requests share one loop, not threads)"
    )
    notes = (
        "taskiq-redis RedisStreamBroker (acknowledges; a dead consumer's messages are "
        "claimed after idle_timeout, 10 min by default); async tasks; worker "
        "defaults (--max-async-tasks 100, --ack-type when_saved); no bulk enqueue"
    )

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import taskiq_app

        self.app = taskiq_app
        self.kind = taskiq_app.KIND
        if self.kind == "list":
            self.notes = self.notes.replace(
                "RedisStreamBroker (acknowledges; a dead consumer's messages are "
                "claimed after idle_timeout, 10 min by default)",
                "ListQueueBroker (BRPOP, no acknowledgement)",
            )
        self.loop = asyncio.new_event_loop()
        # The stream broker creates its consumer group here, at the stream's end
        # ("$"): what is queued after this is what the workers will read.
        self.loop.run_until_complete(taskiq_app.broker.startup())
        import redis

        self.redis = redis.Redis.from_url(url)

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "taskiq-redis": importlib.metadata.version("taskiq-redis")}

    def worker_command(self, bin_dir: Path, threads: int, workdir: Path) -> list[str]:
        return [str(bin_dir / "taskiq"), "worker", "-w", "2", "taskiq_app:broker"]

    def enqueue_noop(self) -> None:
        self.loop.run_until_complete(self.app.noop.kiq())

    def enqueue_loop(self, count: int, deadline: float) -> int:
        async def loop() -> int:
            done = 0
            while done < count and time.monotonic() < deadline:
                await self.app.noop.kiq()
                done += 1
            return done

        return self.loop.run_until_complete(loop())

    def enqueue_concurrent(self, producers: int, each: int) -> tuple[float, list[str]]:
        errors: list[str] = []

        async def produce(count: int) -> None:
            try:
                for _ in range(count):
                    await self.app.noop.kiq()
            except Exception as error:
                errors.append(f"{type(error).__name__}: {error}")

        async def run() -> float:
            await asyncio.gather(*(produce(10) for _ in range(producers)))  # connections
            started = time.monotonic()
            await asyncio.gather(*(produce(each) for _ in range(producers)))
            return time.monotonic() - started

        return self.loop.run_until_complete(run()), errors

    def enqueue_hold(self, token: str, seconds: float) -> str:
        task = self.loop.run_until_complete(self.app.hold.kiq(token, seconds))
        return str(task.task_id)

    def backlog(self) -> int:
        """Listed, or added to the stream and not yet delivered to a consumer."""
        queue = self.app.broker.queue_name
        if self.kind == "list":
            return int(self.redis.llen(queue))
        groups = self.redis.xinfo_groups(queue)
        lag = groups[0].get("lag") if groups else None
        return int(self.redis.xlen(queue) if lag is None else lag)


ADAPTERS: dict[str, Callable[[str], Adapter]] = {
    "jobmaster": Jobmaster,
    "dramatiq": Dramatiq,
    "huey": Huey,
    "celery": Celery,
    "rq": RQ,
    "taskiq": Taskiq,
}


def adapter(name: str, url: str) -> Adapter:
    return ADAPTERS[name](url)


def worker_environment(url: str) -> dict[str, str]:
    """Ours, minus anything that could point a worker at another Redis, plus
    bench/peers on the path (the job modules) and the private URL for the jobs."""
    here = str(Path(__file__).resolve().parent)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("JOBMASTER_") and k != "REDIS_URL"
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    env["BENCH_REDIS_URL"] = url
    return env


def describe(adapter: Adapter) -> dict[str, Any]:
    return {
        "single_api": adapter.single_api,
        "bulk_api": adapter.bulk_api,
        "concurrent_api": adapter.concurrent_api,
        "notes": adapter.notes,
        "versions": adapter.versions(),
    }
