"""The documented Redis ACL rule: enough for jobmaster, nothing outside its namespace.

The rule is read from docs/redis-deployment.md (tests/acl.py). Here a worker and a producer
run under it in another namespace (the substitution the page describes),
and the user is shown to be refused every key, channel and keyless command
that is not jobmaster's. tests/process/test_redis_acl.py runs the real master.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.embedded import RedisServerProcess
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import acl, helpers, jobs
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
PASSWORD = "acl-test-password-3b9f"  # noqa: S105 - a throwaway test server's
StartWorker = Callable[[Config], WorkerProcess]


def user_url(server: RedisServerProcess, user: str, db: int = 0) -> str:
    return f"redis://{user}:{PASSWORD}@127.0.0.1:{server.port}/{db}"


@pytest.fixture
def admin(private_redis: RedisServerProcess) -> Iterator[redis.Redis]:
    with private_redis.client() as conn:
        conn.acl_log_reset()
        yield conn


def test_a_worker_and_a_producer_run_as_a_user_limited_to_their_namespace(
    private_redis: RedisServerProcess,
    admin: redis.Redis,
    make_config: Callable[..., Config],
    running_worker: StartWorker,
) -> None:
    keys = Keys("billing")
    acl.create_user(admin, "billing", PASSWORD, namespace="billing")
    url = user_url(private_redis, "billing", db=1)  # SELECT 1 on every connection
    db1 = redis.Redis(host="127.0.0.1", port=private_redis.port, db=1)
    db1.set("other-app:secret", "not yours")
    numbers = [915_001, 915_002, 915_003, 915_004]
    producer = Client(url, namespace="billing")
    producer.push({"job": "tests.count", "args": [numbers[0]]})
    producer.push({"job": "tests.count", "args": [numbers[1]], "at": time.time() + 0.3})
    producer.push_bulk({"job": "tests.count", "args": [[numbers[2]], [numbers[3]]]})
    # Over 1,000 jobs go in a pipeline of scripts (SCRIPT EXISTS first); parked
    # on a queue no worker serves.
    producer.push_bulk({"job": "tests.count", "args": [[0]] * 1001, "queue": "parked"})
    assert db1.llen(keys.queue("parked")) == 1001

    worker = running_worker(make_config(url=url, namespace="billing"))
    wait_until(lambda: all(jobs.COUNTS[n] == 1 for n in numbers), timeout=15, message="4 runs")
    assert db1.exists(keys.heartbeat(worker.ctx.name))  # written as that user
    worker.stop(timeout=5)

    assert acl.acl_log(admin) == []  # not one command was refused
    assert db1.get("other-app:secret") == b"not yours"
    assert all(
        key.startswith(b"billing:{billing}:") or key == b"other-app:secret" for key in db1.keys("*")
    )
    assert admin.dbsize() == 0  # database 0 untouched
    db1.close()


REFUSED: list[tuple[str, tuple[object, ...]]] = [
    ("read a key of another app", ("GET", "other-app:secret")),
    ("write a key of another app", ("SET", "other-app:secret", "x")),
    ("write another namespace", ("LPUSH", "billing:{billing}:queue:default", "{}")),
    ("publish on another channel", ("PUBLISH", "billing:{billing}:wakeup:default", "1")),
    ("flush every database", ("FLUSHALL",)),
    ("flush the database", ("FLUSHDB",)),
    ("list key names", ("KEYS", "*")),
    ("scan key names", ("SCAN", "0")),
    ("pick a random key name", ("RANDOMKEY",)),
    ("count keys", ("DBSIZE",)),
    ("read the config", ("CONFIG", "GET", "requirepass")),
    ("list users", ("ACL", "LIST")),
    ("list clients", ("CLIENT", "LIST")),
    ("delete other apps' functions", ("FUNCTION", "FLUSH")),
    ("flush other apps' scripts", ("SCRIPT", "FLUSH")),
    ("run arbitrary Lua", ("EVAL", "return 1", "0")),
    ("watch every command", ("MONITOR",)),
]


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServerProcess]:
    """One server with the documented user for every refusal below (one server each
    would cost more than the checks); a refusal that failed shows in the next ones."""
    server = RedisServerProcess(tmp_path_factory.mktemp("redis-acl"), port=helpers.free_port())
    server.start()
    try:
        with server.client() as conn:
            acl.create_user(conn, "jobmaster", PASSWORD)
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize(("what", "command"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_user_may_not(
    limited_server: RedisServerProcess, what: str, command: tuple[object, ...]
) -> None:
    with limited_server.client() as admin:
        admin.set("other-app:secret", "not yours")
        with (
            redis.Redis.from_url(user_url(limited_server, "jobmaster")) as user,
            pytest.raises(redis.exceptions.NoPermissionError),
        ):
            user.execute_command(*command)
        assert admin.get("other-app:secret") == b"not yours"


def test_a_script_run_as_the_user_cannot_reach_other_keys_but_its_own(
    private_redis: RedisServerProcess, admin: redis.Redis
) -> None:
    """EVALSHA is allowed, but each command inside the script is checked too."""
    acl.create_user(admin, "jobmaster", PASSWORD)
    admin.set("other-app:secret", "not yours")
    own = Keys().queue("default")
    with redis.Redis.from_url(user_url(private_redis, "jobmaster")) as user:
        script = user.register_script("return redis.call('GET', KEYS[1])")
        user.set(own, "mine")
        assert script(keys=[own]) == b"mine"  # SCRIPT LOAD + EVALSHA, in the namespace
        with pytest.raises(redis.exceptions.ResponseError, match=r"(?i)permission|NOPERM"):
            script(keys=["other-app:secret"])
        subscriber = user.pubsub()
        # Pub/sub replies come later, on the subscriber's connection.
        subscriber.subscribe(Keys().wakeup_channel("default"))  # its own channel: fine
        assert subscriber.get_message(timeout=2)["type"] == "subscribe"
        subscriber.subscribe("billing:{billing}:wakeup:default")
        with pytest.raises(redis.exceptions.NoPermissionError):
            subscriber.get_message(timeout=2)
        subscriber.close()


PRODUCER_REFUSED: list[tuple[str, tuple[object, ...]]] = [
    ("stop a worker", ("RPUSH", "jobmaster:{jobmaster}:control:host:1:master", "stop")),
    ("forge a heartbeat", ("HSET", "jobmaster:{jobmaster}:heartbeat:host:1:x", "pid", "1")),
    ("silence a heartbeat", ("DEL", "jobmaster:{jobmaster}:heartbeat:host:1:x")),
    ("forge a master", ("SADD", "jobmaster:{jobmaster}:masters", "host:1:x")),
    ("forge a process", ("SADD", "jobmaster:{jobmaster}:processes", "host:1:x")),
    ("take an in-progress job", ("LPOP", "jobmaster:{jobmaster}:inprogress:host:1:x")),
    ("bury a job", ("ZADD", "jobmaster:{jobmaster}:dead", "1", "{}")),
    ("forge a counter", ("SET", "jobmaster:{jobmaster}:stat:processed", "x")),
    ("take the orphan scan", ("SET", "jobmaster:{jobmaster}:orphan-scan", "me")),
    ("age a silent mark", ("SET", "jobmaster:{jobmaster}:silent:host:1:x", "1", "PX", "1")),
]


def test_the_producer_user_enqueues_every_way_and_controls_nothing(
    private_redis: RedisServerProcess, admin: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented producer user (no ``control:*``): a remote stop pushed by a
    web app's credentials is refused, and so is every forgery of worker state."""
    import jobmaster

    acl.create_user(admin, acl.PRODUCER, PASSWORD, rule=acl.PRODUCER)
    url = user_url(private_redis, acl.PRODUCER)
    monkeypatch.setattr(jobmaster.client, "_default", None)
    jobmaster.configure(url)
    producer = Client(url)
    producer.push({"job": "tests.count", "args": [1]})
    producer.push({"job": "tests.count", "args": [2], "at": time.time() + 60})
    producer.push_bulk({"job": "tests.count", "args": [[3], [4]]})
    assert jobs.unique_started.enqueue("u") is not None
    with jobmaster.batch(on_complete=jobs.callback.s("done")).jobs():
        jobs.member.enqueue(1)
    jobmaster.chain(jobs.step.s("a"), jobs.step.s("b"))
    assert acl.acl_log(admin) == []  # every enqueue went through
    assert admin.llen(Keys().queue("default")) >= 5

    with redis.Redis.from_url(url) as user:
        for what, command in PRODUCER_REFUSED:
            with pytest.raises(redis.exceptions.NoPermissionError):
                user.execute_command(*command)
                pytest.fail(f"the producer could {what}")
    assert not admin.exists("jobmaster:{jobmaster}:control:host:1:master")


def test_the_producer_user_waits_for_results_cancels_and_reads_status(
    private_redis: RedisServerProcess,
    admin: redis.Redis,
    make_config: Callable[..., Config],
    running_worker: StartWorker,
) -> None:
    """Issue 23, item 4: as the documented producer user, ``result`` of a complete
    job was None (its NOPERM read as "no result"), ``result(wait=2)`` raised on
    SUBSCRIBE, ``cancel`` raised. The recipe now grants what they need."""
    from click.testing import CliRunner

    from jobmaster.api import Canceller
    from jobmaster.cli import main
    from jobmaster.errors import JobFailed
    from tests import result_jobs

    acl.create_user(admin, acl.PRODUCER, PASSWORD, rule=acl.PRODUCER)
    url = user_url(private_redis, acl.PRODUCER)
    producer = Client(url)
    admin_url = f"redis://127.0.0.1:{private_redis.port}/0"
    worker_config = make_config(url=admin_url)
    added = producer.push({"job": result_jobs.add.name, "args": [2, 3]})
    failed = producer.push({"job": result_jobs.fails.name, "args": ["no luck"]})
    later = producer.push({"job": "tests.count", "args": [1], "at": time.time() + 60})
    queued = producer.push({"job": "tests.count", "args": [2], "queue": "parked"})
    running_worker(worker_config)
    assert producer.result(added, wait=10) == {"sum": 5}  # waited on its channel
    with pytest.raises(JobFailed, match="no luck"):
        producer.result(failed, wait=10)
    assert Canceller(producer).cancel(later).removed_from == "scheduled"
    assert Canceller(producer).cancel(queued).removed_from == "queue parked"
    status = CliRunner().invoke(main, ["status", added, "--redis-url", url])
    assert status.exit_code == 0 and "complete" in status.output, status.output
    assert acl.acl_log(admin) == []  # not one command was refused


def test_a_refused_read_is_an_error_that_names_the_grant(
    private_redis: RedisServerProcess, admin: redis.Redis
) -> None:
    """A user without ``result:*`` (the old recipe): a complete job's result is a
    permission error naming the key and grant, never None."""
    from jobmaster.errors import RedisPermissionError

    keys = Keys()
    waiting = [f"~{keys.result('*')}", f"~{keys.result_waiter('*')}"]
    users = [
        ("narrow", [], []),
        ("wider", [f"~{keys.result('*')}"], []),
        ("waits", waiting, ["+set"]),
    ]
    for user, grants, commands in users:
        admin.execute_command(
            "ACL", "SETUSER", user, "on", f">{PASSWORD}", "resetkeys",
            f"~{keys.status('*')}", f"~{keys.attempts('*')}", *grants, "nocommands", "+@read",
            "+@connection", "+evalsha", "+script|load", "+script|exists", "+info", *commands,
        )  # fmt: skip
    admin.set(keys.status("j1"), "complete")
    admin.set(keys.result("j1"), "42")
    narrow = Client(user_url(private_redis, "narrow"))
    with pytest.raises(RedisPermissionError, match=r"result:\*") as refused:
        narrow.result("j1")
    assert keys.result("j1") in str(refused.value)
    admin.set(keys.status("j2"), "queued")
    with pytest.raises(RedisPermissionError, match=r"~.*waiting:\*"):
        Client(user_url(private_redis, "wider")).result("j2", wait=2)
    with pytest.raises(RedisPermissionError, match=r"\+subscribe and &.*ended:\*"):
        Client(user_url(private_redis, "waits")).result("j2", wait=2)
