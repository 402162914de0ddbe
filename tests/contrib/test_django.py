"""Django's Tasks framework on jobmaster, across a real forked worker, on SQLite and
on the machine's PostgreSQL (a database of the test's own, created and dropped).

The test process is the producer (Django set up with no database: it only
enqueues and reads results); the worker runs ``app =
["jobmaster.contrib.django"]`` with the project's settings, whose tasks
module ran a query in the master before the fork.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from jobmaster import crypto, exitcodes
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, wait_for_worker

django = pytest.importorskip("django")

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
SETTINGS = "tests.contrib.djangoproject.settings"
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]
POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


@pytest.fixture(scope="module")
def shop() -> Any:
    """Django set up in this process (the producer), and the shop's tasks."""
    saved = os.environ.get("DJANGO_SETTINGS_MODULE")
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    try:
        django.setup()  # reads the variable once: later tests' processes need not see it
    finally:
        if saved is None:
            del os.environ["DJANGO_SETTINGS_MODULE"]
        else:
            os.environ["DJANGO_SETTINGS_MODULE"] = saved
    from tests.contrib.djangoproject.shop import tasks

    return tasks


@pytest.fixture
def producer(shop: Any, redis_url: str) -> Iterator[Any]:
    """The backend pointed at this test's Redis (its OPTIONS read the URL)."""
    from django.test import override_settings

    tasks_setting = {
        "default": {
            "BACKEND": "jobmaster.contrib.django.JobmasterBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"REDIS_URL": redis_url},
        }
    }
    with override_settings(TASKS=tasks_setting):
        yield shop


def postgres_available() -> bool:
    try:
        import psycopg

        psycopg.connect(dbname="postgres", connect_timeout=3, **POSTGRES).close()
    except Exception:
        return False
    return True


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """``DJANGO_TEST_DATABASE`` for the worker: a SQLite file, or a PostgreSQL
    database of this test's own, dropped after it."""
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'shop.sqlite3'}"
        return
    if not postgres_available():
        pytest.skip("no PostgreSQL server on 127.0.0.1:5432 (CI's machine has one)")
    import psycopg

    name = f"jobmaster_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dbname="postgres", autocommit=True, **POSTGRES) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres:{name}"
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **POSTGRES) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def worker(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    database: str,
    tmp_path: Path,
) -> Iterator[tuple[JobmasterProcess, str, Path]]:
    session_file = tmp_path / "master-session"
    env = {
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "DJANGO_TEST_DATABASE": database,
        "DJANGO_TEST_REDIS_URL": redis_url,
        "DJANGO_TEST_MASTER_SESSION": str(session_file),
    }
    config = write_config(
        app=["jobmaster.contrib.django"],
        processes=2,
        queues=["default", "emails"],
        max_crashes=1,  # a task that kills its process is buried at once
        secret_key=SECRET,  # encrypt=True tasks
    )
    master = run_jobmaster("-c", str(config), env=env)
    wait_for_worker(store, master)
    yield master, database, session_file
    if master.popen.poll() is None:
        master.signal(signal.SIGTERM)
        assert master.wait(timeout=30) == exitcodes.OK, master.log()


def finished(task: Any, result_id: str, timeout: float = 30) -> Any:
    """The task's result once it finished (polled through get_result)."""
    found: list[Any] = []

    def done() -> bool:
        result = task.get_result(result_id)
        found[:] = [result]
        return bool(result.is_finished)

    wait_until(done, timeout=timeout, interval=0.05, message=f"task {result_id} to finish")
    return found[0]


def test_tasks_enqueued_from_code_a_view_and_the_shell_run_in_forked_children(
    producer: Any, worker: tuple[JobmasterProcess, str, Path], redis_url: str
) -> None:
    from django.test import Client as WebClient

    from jobmaster.contrib.django import compat

    master, database, session_file = worker
    tasks = producer
    before = datetime.datetime.now(datetime.timezone.utc)
    enqueued = tasks.add.enqueue(1, 2)
    assert enqueued.status == compat.TaskResultStatus.READY
    assert (enqueued.args, enqueued.kwargs, enqueued.backend) == ([1, 2], {}, "default")

    answer = WebClient().get("/orders/7/total")  # a view enqueues
    assert answer.status_code == 200
    from_view = answer.json()["task"]

    shell = subprocess.run(  # `manage.py shell -c`, as an operator would
        [sys.executable, "-m", "django", "shell", "-c", SHELL_ENQUEUE],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "DJANGO_TEST_REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    from_shell = shell.stdout.strip().splitlines()[-1]

    done = finished(tasks.add, enqueued.id)
    assert done.status == compat.TaskResultStatus.SUCCESSFUL
    assert done.return_value["sum"] == 3
    assert done.return_value["pid"] != master.pid  # a forked child ran it
    assert done.attempts == 1 and len(done.worker_ids) == 1
    assert done.worker_ids[0].endswith(f":{done.return_value['pid']}")
    assert done.errors == []
    assert before <= done.enqueued_at <= done.started_at <= done.finished_at
    assert done.last_attempted_at == done.started_at
    assert done.enqueued_at.tzinfo is not None  # USE_TZ: aware
    assert finished(tasks.add, from_view).return_value["sum"] == 1007
    assert finished(tasks.add, from_shell).return_value["sum"] == 42

    # refresh() reads the same record: an old result object catches up.
    enqueued.refresh()
    assert enqueued.status == compat.TaskResultStatus.SUCCESSFUL
    assert enqueued.return_value == done.return_value

    # Many tasks over both children's threads: each its own connection, on the
    # database the master's preloaded query also used (no shared session).
    many = [tasks.add.enqueue(100 + n, 0) for n in range(30)]
    results = [finished(tasks.add, r.id) for r in many]
    assert all(r.status == compat.TaskResultStatus.SUCCESSFUL for r in results)
    assert {r.return_value["rows"] for r in results} == {1}
    assert len({r.return_value["pid"] for r in results}) >= 1

    # Each child's warm-up query (on_child_start) ran before its first job.
    warmed: list[str] = []

    def both_warmed() -> bool:  # a child may still be starting: its warm-up comes first
        warmed[:] = finished(tasks.sessions, tasks.sessions.enqueue().id).return_value
        return len(warmed) >= 2

    wait_until(both_warmed, timeout=30, message="both children's warm-up queries")
    assert len(warmed) == 2
    if database.startswith("postgres"):
        master_session = int(session_file.read_text())
        # ...each on a session of its own, not the one inherited from the master
        assert len(set(warmed)) == 2 and str(master_session) not in warmed
        # The master's session, opened by the preloaded query before the forks,
        # is alive after children used (and, by a rolling restart, left) theirs:
        # no child said goodbye on it.
        master.signal(signal.SIGHUP)
        wait_until(
            lambda: (
                finished(tasks.add, tasks.add.enqueue(999, 0).id).return_value["pid"]
                not in {r.return_value["pid"] for r in results}
            ),
            timeout=60,
            message="a task run by a child of the rolling restart",
        )
        assert master_session in postgres_sessions(database.partition(":")[2])


SHELL_ENQUEUE = (
    "from tests.contrib.djangoproject.shop.tasks import add; print(add.enqueue(40, 2).id)"
)


def postgres_sessions(name: str) -> set[int]:
    import psycopg

    with psycopg.connect(dbname="postgres", autocommit=True, **POSTGRES) as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [name])
        return {int(pid) for (pid,) in rows.fetchall()}


def test_failures_context_retries_defer_and_refusals(
    producer: Any, worker: tuple[JobmasterProcess, str, Path]
) -> None:
    from jobmaster.contrib.django import DuplicateTask, compat

    tasks = producer
    refused = tasks.refuse.enqueue(5)
    lucky = tasks.second_time_lucky.enqueue(6)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)
    deferred = tasks.add.using(run_after=later).enqueue(300, 1)
    assert tasks.add.get_result(deferred.id).status == compat.TaskResultStatus.READY
    coroutine = asyncio.run(tasks.wait_a_bit.aenqueue(8))

    failed = finished(tasks.refuse, refused.id)
    assert failed.status == compat.TaskResultStatus.FAILED
    assert failed.attempts == 1  # Django's contract: no retry unless asked
    (error,) = failed.errors
    assert error.exception_class_path == "tests.contrib.djangoproject.shop.tasks.OutOfStock"
    assert error.exception_class is tasks.OutOfStock
    assert "order 5: nothing left" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        _ = failed.return_value

    retried = finished(tasks.second_time_lucky, lucky.id)
    assert retried.status == compat.TaskResultStatus.SUCCESSFUL
    assert retried.return_value == {"attempt": 2, "id": lucky.id}
    assert retried.attempts == 2 and len(retried.errors) == 1

    ran = finished(tasks.add, deferred.id)
    assert ran.started_at >= later
    assert ran.return_value["sum"] == 301

    slow = finished(tasks.too_slow, tasks.too_slow.enqueue(30).id)
    assert slow.status == compat.TaskResultStatus.FAILED
    assert [e.exception_class_path for e in slow.errors] == ["jobmaster.errors.JobTimeout"]

    crypto.set_keys(SECRET)
    try:
        card = tasks.charge_card.enqueue("4242-4242")
    finally:
        crypto.set_keys(None)
    sealed = finished(tasks.charge_card, card.id)
    assert sealed.status == compat.TaskResultStatus.FAILED
    assert (sealed.args, sealed.kwargs) == ([], {})  # never kept in clear
    (error,) = sealed.errors
    assert error.exception_class is tasks.OutOfStock
    assert "4242" not in error.traceback

    crashed = finished(tasks.crash, tasks.crash.enqueue().id)
    assert crashed.status == compat.TaskResultStatus.FAILED
    assert [e.exception_class_path for e in crashed.errors] == ["jobmaster.errors.PoisonPill"]

    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)
    first = tasks.sync_account.using(run_after=soon).enqueue(9)
    with pytest.raises(DuplicateTask, match="unique"):
        tasks.sync_account.enqueue(9)
    assert finished(tasks.sync_account, first.id).return_value == 9
    assert finished(tasks.sync_account, tasks.sync_account.enqueue(9).id).return_value == 9

    async_result = asyncio.run(tasks.wait_a_bit.aget_result(coroutine.id))
    wait_until(lambda: tasks.wait_a_bit.get_result(coroutine.id).is_finished, timeout=30)
    assert tasks.wait_a_bit.get_result(coroutine.id).return_value == 8
    assert async_result.id == coroutine.id

    with pytest.raises(compat.InvalidTask, match="not valid"):
        tasks.add.using(queue_name="nowhere").enqueue(1, 1)
    with pytest.raises(compat.InvalidTask, match="no per-task priority"):
        tasks.add.using(priority=10).enqueue(1, 1)
    with pytest.raises(compat.InvalidTask, match="aware"):
        tasks.add.using(run_after=datetime.datetime(2030, 1, 1)).enqueue(1, 1)
    with pytest.raises(compat.TaskResultDoesNotExist):
        tasks.add.get_result("0" * 24)
    with pytest.raises(compat.TaskResultDoesNotExist):
        asyncio.run(tasks.add.aget_result("no such id"))


def test_the_backend_checks_its_settings(producer: Any) -> None:
    from jobmaster.contrib.django import JobmasterBackend

    fine = JobmasterBackend("default", {"QUEUES": ["default"], "OPTIONS": {}})
    assert list(fine.check()) == []
    bad = JobmasterBackend(
        "other", {"QUEUES": ["ok", "bad name"], "OPTIONS": {"CONFIG": "/nonexistent.toml", "X": 1}}
    )
    ids = sorted(message.id for message in bad.check())
    assert ids == ["jobmaster.E001", "jobmaster.E002", "jobmaster.E003"]


def test_the_management_command_runs_jobmaster_for_the_project(
    write_config: Write, redis_url: str
) -> None:
    config = write_config(app=["jobmaster.contrib.django"], queues=["default", "emails"])
    checked = subprocess.run(
        [sys.executable, "-m", "django", "jobmaster", "check", "-c", str(config)],
        check=False,  # its output is read first
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "JOBMASTER_REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The worker runs exactly the tasks of the apps' tasks modules, by module path.
    (jobs,) = [line for line in checked.stdout.splitlines() if line.startswith("jobs:")]
    names = {name.strip() for name in jobs.partition(":")[2].split(",")}
    shop = "tests.contrib.djangoproject.shop.tasks."
    assert names == {shop + name for name in TASK_NAMES}


TASK_NAMES = {"add", "crash", "refuse", "second_time_lucky", "sessions", "sync_account"}
TASK_NAMES |= {"too_slow", "wait_a_bit", "charge_card"}
SECRET = "a-secret-for-tests-only-0123456789"  # noqa: S105


def test_a_run_ending_between_get_results_two_reads_never_shows_an_end_without_its_attempt(
    producer: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """get_result reads the status, then the record: a run writes its record
    (worker, error) before its FINISH writes the status. Read the other way
    round, a run ending between the two reads showed FAILED with no attempt
    (seen in CI on a loaded machine). The run is made to end right there."""
    from jobmaster.client import Client
    from jobmaster.contrib.django import compat, records

    tasks = producer
    jid = tasks.refuse.enqueue(5).id
    client = Client(redis_url)
    real_read = records.read

    def read_as_a_run_ends(*args: Any) -> Any:
        """The record as it is now; then the run ends (its record, then its status)."""
        found = real_read(*args)
        if not client.redis.exists(f"{client.keys.prefix}django:{jid}:ran"):
            client.redis.set(f"{client.keys.prefix}django:{jid}:ran", 1)
            records.started(client.redis, client.keys, jid, "host:1:w", 60)
            records.finished(client.redis, client.keys, jid, 60, ("shop.OutOfStock", "tb"))
            client.redis.set(client.keys.status(jid), "dead")  # its FINISH, last
        return found

    monkeypatch.setattr(records, "read", read_as_a_run_ends)
    seen = tasks.refuse.get_result(jid)
    if seen.status == compat.TaskResultStatus.FAILED:
        assert seen.attempts == 1
    assert tasks.refuse.get_result(jid).status == compat.TaskResultStatus.FAILED
    assert tasks.refuse.get_result(jid).attempts == 1
