"""Redis misbehaving under a running worker: full, replaced by an empty one, slow.

- Out of memory: Redis refuses writes with a ``ResponseError`` (OOM), not a
  ``ConnectionError``. Producers get a readable ``EnqueueError``; workers
  back off, keep their heartbeat alive, log once, and lose nothing.
- Replaced: a fresh, empty server on the same address (data lost). Workers
  carry on, re-register, reload their scripts, and say what happened.
- Slow: ``DEBUG SLEEP`` and ``CLIENT PAUSE`` within the socket timeout must
  not run anything twice; past the timeout, a FETCH or FINISH that Redis
  runs after the client gave up must neither lose a job nor record it twice.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Iterator

import pytest
import redis

import jobmaster
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.embedded import RedisServerProcess
from jobmaster.errors import EnqueueError
from jobmaster.keys import Keys
from jobmaster.scripts import FETCH, FINISH
from jobmaster.worker.executor import execute
from jobmaster.worker.outcome import record
from jobmaster.worker.process import WorkerProcess
from jobmaster.worker.selfcheck import SelfCheck
from tests import helpers, jobs
from tests.helpers import wait_until
from tests.redis_trouble import BALLAST, fill_up, replace_with_an_empty_one

K = Keys()
StartWorker = Callable[[Config], WorkerProcess]


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    jobs.COUNTS.clear()


@pytest.fixture
def debug_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServerProcess]:
    """A private server that accepts DEBUG SLEEP (off by default since Redis 7)."""
    server = RedisServerProcess(
        tmp_path_factory.mktemp("redis-debug"),
        port=helpers.free_port(),
        extra_args=("--enable-debug-command", "local"),
    )
    assert server.port != helpers.FORBIDDEN_PORT
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def jobmaster_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="jobmaster")
    return caplog


def holds_for(predicate: Callable[[], object], seconds: float, message: str) -> None:
    """Assert ``predicate`` stays true for ``seconds`` (checked every 50 ms)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(0.05)


def messages(
    caplog: pytest.LogCaptureFixture, text: str, level: int = logging.WARNING
) -> list[str]:
    """Messages logged at ``level`` that contain ``text``."""
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


def threads_of(worker: WorkerProcess) -> list[object]:
    return [
        *worker.manager.processors,
        worker.manager.listener,
        worker.heartbeat,
        worker.poller,
        worker.selfcheck,
        worker.watchdog,
    ]


def assert_all_alive(worker: WorkerProcess) -> None:
    dead = [t.name for t in threads_of(worker) if not t.is_alive()]  # type: ignore[attr-defined]
    assert not dead, f"threads died: {dead}"


def assert_nothing_left(store: redis.Redis, worker: WorkerProcess) -> None:
    assert store.llen(worker.ctx.inprogress_key) == 0
    assert store.llen(K.queue("default")) == 0
    assert store.zcard(K.dead) == 0 and store.zcard(K.retry) == 0


def processed(store: redis.Redis) -> int:
    return int(store.get(K.stat("processed")) or 0)


# -- out of memory ------------------------------------------------------------


@pytest.mark.timeout(30)
def test_enqueue_into_a_full_redis_raises_a_readable_enqueue_error(
    private_redis: RedisServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = private_redis.url
    monkeypatch.setattr(jobmaster.client, "_default", None)  # what the job API pushes with
    jobmaster.configure(url)
    client = Client(url)
    admin = fill_up(private_redis)
    attempts: dict[str, Callable[[], object]] = {
        "job.enqueue": lambda: jobs.count.enqueue(1),
        "Client.push": lambda: client.push({"job": "tests.count", "args": [1]}),
        "push_bulk": lambda: client.push_bulk({"job": "tests.count", "args": [[1], [2]]}),
        "enqueue_in": lambda: jobs.count.enqueue_in(60, 1),
        "unique": lambda: jobs.unique_exec.enqueue("u1"),
    }
    for how, enqueue in attempts.items():
        with pytest.raises(EnqueueError) as raised:
            enqueue()
        text = str(raised.value)
        name = "tests.unique_exec" if how == "unique" else "tests.count"
        assert text.startswith(f"could not enqueue {name}: Redis is out of memory"), (how, text)
        assert "maxmemory" in text, (how, text)
        # Readable, not the raw reply (nor, from a MULTI, the command and its payload).
        assert "command not allowed" not in text and "Command #" not in text, (how, text)
        assert isinstance(raised.value.__cause__, redis.exceptions.OutOfMemoryError)
    # Refused whole: no job, status, scheduled entry or unique lock half-written.
    assert admin.keys("*") == [BALLAST.encode()]
    admin.delete(BALLAST)
    assert jobs.count.enqueue(1) is not None and jobs.unique_exec.enqueue("u1") is not None


@pytest.mark.timeout(40)
def test_a_worker_rides_out_a_full_redis_and_loses_nothing(
    private_redis: RedisServerProcess,
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    jobmaster_logs: pytest.LogCaptureFixture,
) -> None:
    url = private_redis.url
    store = private_redis.client()
    client = Client(url)
    client.push_bulk({"job": "tests.slow_count", "args": [[n, 1.0] for n in range(4)]})
    client.push_bulk({"job": "tests.slow_count", "args": [[n, 0.005] for n in range(4, 204)]})
    worker = running_worker(make_config(url, concurrency=4, heartbeat_ttl=2))
    wait_until(lambda: worker.manager.busy == 4, timeout=10, message="the 4 slow jobs running")
    admin = fill_up(private_redis)

    # Jobs running as Redis filled up finish, and their outcome and ack are
    # stored: FINISH begins with an LREM, which Redis never refuses.
    wait_until(lambda: len(jobs.COUNTS) == 4, timeout=10, message="the 4 slow jobs done")
    wait_until(lambda: processed(store) == 4, timeout=10, message="their outcomes recorded")
    assert store.llen(worker.ctx.inprogress_key) == 0
    # Then no fetch gets through, and the heartbeat outlives its 2 s TTL
    # (kept alive by EXPIRE): no other process would take our jobs as orphans.
    heartbeat = K.heartbeat(worker.ctx.name)
    holds_for(
        lambda: store.llen(K.queue("default")) == 200 and store.exists(heartbeat),
        seconds=3.0,
        message="a fetch got through, or the heartbeat expired, while Redis was full",
    )

    admin.delete(BALLAST)  # memory freed: everything resumes
    wait_until(lambda: len(jobs.COUNTS) == 204, timeout=20, message="all 204 jobs done")
    wait_until(lambda: processed(store) == 204, timeout=10, message="all outcomes recorded")
    assert set(jobs.COUNTS.values()) == {1}, "a job ran twice"
    assert_nothing_left(store, worker)
    assert_all_alive(worker)
    # One warning per duty and outage, in words, not one per attempt or thread.
    for duty in ("fetch", "heartbeat"):
        warned = messages(jobmaster_logs, f"{duty}: Redis unavailable (Redis is out of memory")
        assert len(warned) == 1, warned
    assert len(messages(jobmaster_logs, "fetch: Redis reachable again", logging.INFO)) == 1
    assert not [r for r in jobmaster_logs.records if r.levelno >= logging.ERROR]


# -- replaced by an empty server ----------------------------------------------


@pytest.mark.timeout(40)
def test_a_worker_survives_redis_replaced_by_an_empty_one_and_says_so(
    private_redis: RedisServerProcess,
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    jobmaster_logs: pytest.LogCaptureFixture,
) -> None:
    url = private_redis.url
    store = private_redis.client()
    worker = running_worker(make_config(url, concurrency=2, heartbeat_ttl=3))
    Client(url).push({"job": "tests.slow_count", "args": [0, 2.0]})  # in flight across it
    wait_until(lambda: worker.manager.busy == 1, timeout=10, message="job 0 running")
    old_run_id = store.info("server")["run_id"]

    replace_with_an_empty_one(private_redis)
    new_run_id = store.info("server")["run_id"]
    assert new_run_id != old_run_id and store.get(K.stat("processed")) is None  # really empty

    # New jobs are fetched (FETCH reloaded on NOSCRIPT) and run once each.
    Client(url).push_bulk({"job": "tests.slow_count", "args": [[n, 0.0] for n in range(1, 21)]})
    wait_until(lambda: len(jobs.COUNTS) == 21, timeout=15, message="jobs pushed after it ran")
    assert set(jobs.COUNTS.values()) == {1}
    # Registered again: the heartbeat and the set of in-progress list owners.
    wait_until(
        lambda: (
            store.exists(K.heartbeat(worker.ctx.name))
            and store.sismember(K.processes, worker.ctx.name)
        ),
        timeout=5,
        message="heartbeat re-registered",
    )
    # Job 0's in-progress entry went with the old server: nobody holds it, so
    # its outcome is not recorded (SPEC §8: only the holder of an entry
    # records it), and the log says so.
    wait_until(
        lambda: messages(jobmaster_logs, "not recorded: the job is no longer in"),
        timeout=10,
        message="job 0's outcome refused",
    )
    wait_until(lambda: processed(store) == 20, timeout=10, message="outcomes recorded")
    warned = messages(jobmaster_logs, "was replaced or emptied")
    assert len(warned) == 1, warned
    assert f"(run_id {old_run_id} -> {new_run_id})" in warned[0]
    assert "re-registering" in warned[0] and "may be lost" in warned[0]
    assert_nothing_left(store, worker)
    assert_all_alive(worker)


# -- slow -------------------------------------------------------------------


@pytest.mark.timeout(40)
def test_debug_sleep_and_client_pause_run_each_job_once(
    debug_redis: RedisServerProcess,
    make_config: Callable[..., Config],
    running_worker: StartWorker,
) -> None:
    url = debug_redis.url
    store = debug_redis.client()
    client = Client(url)
    worker = running_worker(make_config(url, concurrency=4))
    markers: list[str] = []

    def push(stage: str, count: int = 100) -> None:
        batch = [f"{stage}-{n}" for n in range(count)]
        markers.extend(batch)
        client.push_bulk({"job": "tests.record", "args": [[m] for m in batch]})

    def some_done() -> None:
        goal = len(markers) - 80
        wait_until(lambda: store.hlen("test:runs") >= goal, timeout=15, message="jobs running")

    push("before-sleep")
    some_done()
    store.execute_command("DEBUG", "SLEEP", 2)  # the whole server stalls 2 s
    push("before-pause-write")
    some_done()
    store.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
    push("during-pause-write")  # waits out the pause, like the worker's writes
    some_done()
    store.execute_command("CLIENT", "PAUSE", 3000, "ALL")
    push("during-pause-all")

    wait_until(lambda: store.hlen("test:runs") == 400, timeout=30, message="all 400 jobs ran")
    wait_until(lambda: processed(store) == 400, timeout=10, message="all outcomes recorded")
    runs = {k.decode(): int(v) for k, v in store.hgetall("test:runs").items()}
    assert runs == dict.fromkeys(markers, 1), "a job ran twice"
    assert_nothing_left(store, worker)
    assert_all_alive(worker)


def short_timeout_worker(config: Config, seconds: float) -> WorkerProcess:
    """A worker whose Redis calls give up after ``seconds`` (not started yet).

    Its scripts are loaded, as on a server it has been using: an EVALSHA that
    Redis does not know yet fails with NOSCRIPT, late or not, and proves nothing.
    """
    worker = WorkerProcess(config)
    worker.ctx.redis.connection_pool.connection_kwargs["socket_timeout"] = seconds
    for script in (FETCH, FINISH):
        worker.ctx.redis.script_load(script)
    return worker


def start_debug_sleep(store: redis.Redis, seconds: float) -> redis.connection.Connection:
    """Send DEBUG SLEEP without waiting for its reply, and return once Redis is
    asleep: a PING on a connection of its own goes unanswered. Sent and not
    yet read, the sleep could follow a command another connection sent after
    it (Redis serves the clients readable at one moment in its own order: on
    a loaded machine, CI saw a FINISH run before the sleep)."""
    connection = store.connection_pool.get_connection()
    connection.send_command("DEBUG", "SLEEP", seconds)
    kwargs = store.connection_pool.connection_kwargs
    deadline = time.monotonic() + seconds / 2
    while time.monotonic() < deadline:
        # A bare socket: redis-py would retry a timed-out PING until Redis woke.
        with socket.create_connection((kwargs["host"], kwargs["port"]), timeout=1) as probe:
            probe.sendall(b"PING\r\n")
            probe.settimeout(0.05)
            try:
                probe.recv(64)
            except TimeoutError:
                return connection  # asleep: its reply comes after the sleep
        time.sleep(0.005)
    raise AssertionError("Redis never went to sleep")


def end_debug_sleep(store: redis.Redis, connection: redis.connection.Connection) -> None:
    assert connection.read_response() == b"OK"  # the sleep is over
    store.connection_pool.release(connection)


@pytest.mark.timeout(30)
def test_a_fetch_that_redis_runs_after_the_worker_gave_up_is_run_once(
    debug_redis: RedisServerProcess, make_config: Callable[..., Config]
) -> None:
    url = debug_redis.url
    store = debug_redis.client()
    worker = short_timeout_worker(make_config(url, concurrency=2), 0.5)
    worker.selfcheck = SelfCheck(worker.ctx, worker.manager, worker.background_stop, interval=0.3)
    jid = Client(url).push({"job": "tests.record", "args": ["late-fetch"]})

    sleeping = start_debug_sleep(store, 1.5)
    with pytest.raises(redis.TimeoutError):
        worker.manager.fetcher.fetch()  # we give up after 0.5 s...
    end_debug_sleep(store, sleeping)
    # ...and Redis ran it anyway once awake: the job is ours, and no thread runs it.
    # Awake, Redis serves the worker's pending FETCH and our next command in
    # one pass of its event loop, in either order: wait for the move itself.
    wait_until(lambda: store.llen(worker.ctx.inprogress_key) > 0, timeout=5)
    listed = store.lrange(worker.ctx.inprogress_key, 0, -1)
    queued = store.lrange(K.queue("default"), 0, -1)
    calls = {name: stats["calls"] for name, stats in store.info("commandstats").items()}
    assert len(listed) == 1 and not queued, f"in progress {listed}, queued {queued}, {calls}"
    assert json.loads(listed[0])["jid"] == jid

    worker.start()  # its self-check requeues the unclaimed entry
    try:
        wait_until(lambda: store.sismember("test:done", "late-fetch"), timeout=10)
        wait_until(lambda: store.llen(worker.ctx.inprogress_key) == 0, timeout=5)
        assert store.hget("test:runs", "late-fetch") == b"1"
        assert store.llen(K.queue("default")) == 0  # no copy left to run again
    finally:
        worker.stop(timeout=5)


@pytest.mark.timeout(30)
def test_a_quiet_worker_gives_back_at_once_a_job_a_late_fetch_left_in_its_list(
    debug_redis: RedisServerProcess,
    make_config: Callable[..., Config],
    jobmaster_logs: pytest.LogCaptureFixture,
) -> None:
    """The chaos run's quiet found a job in the list of a quiet child for 15 s
    (a FETCH Redis ran after the child gave up on it): no thread runs it,
    and the self-check (20 s here, never reached) came too late. Quiet and
    idle, the worker gives it back to its queue, unrun, within a look."""
    url = debug_redis.url
    store = debug_redis.client()
    worker = short_timeout_worker(make_config(url, concurrency=2), 0.5)
    jid = Client(url).push({"job": "tests.record", "args": ["late-fetch-quiet"]})
    sleeping = start_debug_sleep(store, 1.5)
    with pytest.raises(redis.TimeoutError):
        worker.manager.fetcher.fetch()  # we give up after 0.5 s; Redis runs it once awake
    end_debug_sleep(store, sleeping)
    wait_until(lambda: store.llen(worker.ctx.inprogress_key) == 1, timeout=5)

    worker.manager.quiet()  # as a child forked while the pool is quiet
    began = time.monotonic()
    worker.start()
    try:
        wait_until(
            lambda: store.llen(worker.ctx.inprogress_key) == 0,
            timeout=5,
            message="a quiet, idle worker still holds a job no thread runs",
        )
        took = time.monotonic() - began
        assert took < worker.selfcheck.interval  # not the self-check's doing
        queued = store.lrange(K.queue("default"), 0, -1)
        assert [json.loads(raw)["jid"] for raw in queued] == [jid]
        assert not store.hexists("test:runs", "late-fetch-quiet")  # quiet: not run
        assert messages(jobmaster_logs, "in-progress job(s) that no thread was running")

        worker.manager.resume()  # and it runs once when the worker fetches again
        wait_until(lambda: store.sismember("test:done", "late-fetch-quiet"), timeout=10)
        assert store.hget("test:runs", "late-fetch-quiet") == b"1"
    finally:
        worker.stop(timeout=5)
    print(f"given back {took:.2f}s after the quiet worker started")


@pytest.mark.timeout(30)
def test_a_finish_that_redis_runs_after_the_worker_gave_up_is_recorded_once(
    debug_redis: RedisServerProcess,
    make_config: Callable[..., Config],
    jobmaster_logs: pytest.LogCaptureFixture,
) -> None:
    url = debug_redis.url
    store = debug_redis.client()
    worker = short_timeout_worker(make_config(url), 0.5)  # never started: we drive it
    jid = Client(url).push({"job": "tests.count", "args": [7]})
    unit = worker.manager.fetcher.fetch()
    assert unit is not None
    try:
        outcome = execute(unit, ctx=worker.ctx)
        sleeping = start_debug_sleep(store, 1.5)
        # The first FINISH times out and runs late; record() sends it again until
        # Redis answers, and the resent one must not count the job a second time.
        assert record(worker.ctx, unit.raw, outcome)
        end_debug_sleep(store, sleeping)
    finally:
        worker.ctx.core.close()  # its status-marks flusher: never started, never stopped
    assert jobs.COUNTS[7] == 1
    assert store.llen(worker.ctx.inprogress_key) == 0
    assert processed(store) == 1, "the job was counted twice"
    assert store.llen(K.attempts(jid)) == 1, "the attempt was recorded twice"
    assert store.get(K.status(jid)) == b"complete"
    assert messages(jobmaster_logs, "stored by an earlier call", logging.INFO)


@pytest.mark.timeout(30)
def test_a_worker_starting_while_redis_loads_its_data_waits_instead_of_dying(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    client: Client,
) -> None:
    """Right after a restart Redis answers INFO but refuses writes while it
    loads its AOF (BusyLoadingError): a child starting then must wait for it,
    not die with a traceback (seen in the chaos run's Redis restarts)."""
    from jobmaster.worker.heartbeat import Heartbeat

    real_beat = Heartbeat.beat
    refusals = [2]

    def loading_then_ready(self: Heartbeat) -> None:
        if refusals[0]:
            refusals[0] -= 1
            raise redis.BusyLoadingError("Redis is loading the dataset in memory")
        real_beat(self)

    monkeypatch.setattr(Heartbeat, "beat", loading_then_ready)
    caplog.set_level(logging.WARNING, logger="jobmaster.connection")
    running_worker(make_config())
    jid = client.push({"job": "tests.count", "args": ["after-loading"]})
    wait_until(lambda: client.status(str(jid)) == "complete", 10)
    assert refusals == [0]
    assert sum("waiting for Redis" in r.getMessage() for r in caplog.records) == 2
