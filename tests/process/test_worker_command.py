"""``jobmaster worker`` (one worker process, no master) and the CLI's other commands,
as real processes: signals, stop, recovery, errors."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from jobmaster import liveness
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess, wait_for_worker

pytestmark = pytest.mark.process
K = Keys()
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


def done(store: redis.Redis, marker: str) -> bool:
    return bool(store.sismember("test:done", marker))


def started(store: redis.Redis, marker: str) -> bool:
    return bool(store.sismember("test:started", marker))


def test_term_lets_a_short_job_finish_and_exits_0(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    process = run_jobmaster("worker", "-c", str(write_config()))
    wait_for_worker(store, process)
    Client(redis_url).push({"job": "tests.record", "args": ["short", 1.0]})
    wait_until(lambda: started(store, "short"), timeout=10)
    process.signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    assert done(store, "short")
    assert store.llen(K.queue("default")) == 0


def test_term_with_a_job_longer_than_the_timeout_pushes_it_back(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    config = write_config(shutdown_timeout=1)
    process = run_jobmaster("worker", "-c", str(config))
    identity = wait_for_worker(store, process)
    jid = Client(redis_url).push({"job": "tests.record", "args": ["long", 60]})
    wait_until(lambda: started(store, "long"), timeout=10)
    begun = time.monotonic()
    process.signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    assert time.monotonic() - begun < 1 + 2
    [payload] = [json.loads(raw) for raw in store.lrange(K.queue("default"), 0, -1)]
    assert payload["jid"] == jid
    assert store.llen(K.inprogress(identity)) == 0
    assert "pushing them back" in process.log()
    # The next worker runs it (shorter this time: same jid, args rewritten by us).
    store.delete(K.queue("default"))
    store.rpush(K.queue("default"), json.dumps({**payload, "args": ["long", 0]}))
    second = run_jobmaster("worker", "-c", str(config))
    wait_until(lambda: done(store, "long"), timeout=20)
    second.signal(signal.SIGTERM)
    assert second.wait(timeout=10) == 0


def test_term_to_the_whole_group_and_repeated_terms_do_not_cut_a_job_short(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    process = run_jobmaster("worker", "-c", str(write_config(shutdown_timeout=10)))
    wait_for_worker(store, process)
    Client(redis_url).push({"job": "tests.record", "args": ["steady", 1.5]})
    wait_until(lambda: started(store, "steady"), timeout=10)
    process.signal_group(signal.SIGTERM)  # as Heroku does: every process, twice
    process.signal_group(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    assert done(store, "steady")
    assert store.llen(K.queue("default")) == 0


def test_a_second_interrupt_stops_at_once_and_still_pushes_back(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    process = run_jobmaster("worker", "-c", str(write_config(shutdown_timeout=30)))
    wait_for_worker(store, process)
    jid = Client(redis_url).push({"job": "tests.record", "args": ["ctrl-c", 60]})
    wait_until(lambda: started(store, "ctrl-c"), timeout=10)
    begun = time.monotonic()
    process.signal(signal.SIGINT)
    wait_until(lambda: "graceful stop" in process.log(), timeout=5)
    process.signal(signal.SIGINT)
    assert process.wait(timeout=10) == 0
    assert time.monotonic() - begun < 5  # not the 30 s shutdown_timeout
    assert json.loads(store.lindex(K.queue("default"), 0))["jid"] == jid


def test_tstp_quiets_and_cont_resumes(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    process = run_jobmaster("worker", "-c", str(write_config(heartbeat_ttl=3)))
    identity = wait_for_worker(store, process)
    process.signal(signal.SIGTSTP)
    wait_until(lambda: store.hget(K.heartbeat(identity), "quiet") == b"1", timeout=10)
    Client(redis_url).push({"job": "tests.record", "args": ["waits"]})
    # The job must still be waiting 1.5 s later (a quiet worker would have
    # started it within milliseconds).
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert not started(store, "waits")
        time.sleep(0.05)
    assert store.llen(K.queue("default")) == 1
    process.signal(signal.SIGCONT)
    wait_until(lambda: done(store, "waits"), timeout=10)
    process.signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


def test_remote_stop_through_redis(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    process = run_jobmaster("worker", "-c", str(write_config(heartbeat_ttl=3)))
    identity = wait_for_worker(store, process)
    store.rpush(K.control(identity), "stop")
    assert process.wait(timeout=10) == 0
    assert "remote stop" in process.log()
    assert not store.exists(K.heartbeat(identity))


def test_a_sigkilled_worker_s_job_is_recovered_by_the_next_worker(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    # Same machine: its process is provably gone, so the next worker need not
    # wait for the heartbeat to expire (liveness.py). The dead worker's heartbeat
    # is kept alive below to prove that (with a short TTL a slow start on a
    # loaded machine saw it expire first, and the recovery rightly said so);
    # its orphan-scan lease (half the TTL) still ends within the wait. Elsewhere
    # the next worker must wait for the expiry.
    local = bool(liveness.locus())
    config = write_config(heartbeat_ttl=4 if local else 2)
    first = run_jobmaster("worker", "-c", str(config))
    identity = wait_for_worker(store, first)
    jid = Client(redis_url).push({"job": "tests.record", "args": ["survivor", 1]})
    wait_until(lambda: started(store, "survivor"), timeout=10)
    first.signal(signal.SIGKILL)
    first.wait(timeout=10)
    if local:
        assert store.expire(K.heartbeat(identity), 600), "the dead worker's heartbeat is there"
    assert json.loads(store.lindex(K.inprogress(identity), 0))["jid"] == jid
    second = run_jobmaster("worker", "-c", str(config))
    wait_until(lambda: done(store, "survivor"), timeout=20, message="job recovered and run")
    assert store.llen(K.inprogress(identity)) == 0
    why = "whose process is gone from this machine" if local else "heartbeat expired"
    assert why in second.log()
    second.signal(signal.SIGTERM)
    assert second.wait(timeout=10) == 0


def test_a_config_error_exits_2_naming_the_key_and_file(
    run_jobmaster: Run, write_config: Write
) -> None:
    config = write_config(concurency=4)
    process = run_jobmaster("-c", str(config))
    assert process.wait(timeout=20) == 2
    output = process.log()
    assert f"{config.name}: unknown key 'concurency' (did you mean 'concurrency'?)" in output
    assert "Traceback" not in output


def test_an_app_that_fails_to_import_exits_3(run_jobmaster: Run, write_config: Write) -> None:
    process = run_jobmaster("-c", str(write_config(app=["tests.no_such_module"])))
    assert process.wait(timeout=20) == 3
    assert "cannot import app module 'tests.no_such_module'" in process.log()


def test_check_prints_what_would_run(run_jobmaster: Run, write_config: Write) -> None:
    process = run_jobmaster("check", "-c", str(write_config(queues=["a:2", "b"])))
    assert process.wait(timeout=20) == 0
    output = process.log()
    assert "tests.record" in output and "a:2, b" in output and "Redis 7" in output


def test_check_fails_with_one_line_when_redis_is_unreachable(
    run_jobmaster: Run, write_config: Write, free_port: int
) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port}/0"
    # The environment outranks the file, so that is where the bad URL goes.
    process = run_jobmaster("check", "-c", str(write_config()), env={"JOBMASTER_REDIS_URL": url})
    assert process.wait(timeout=20) == 1
    output = process.log().strip()
    assert output.startswith("jobmaster: ") and "\n" not in output
    assert "hunter2" not in output


def test_enqueue_command_pushes_json_arguments(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    process = run_jobmaster(
        "enqueue", "-c", str(write_config()), "tests.record", '"from-cli"', "--queue", "cli"
    )
    assert process.wait(timeout=20) == 0
    jid = process.log().strip()
    payload = json.loads(store.lindex(K.queue("cli"), 0))
    assert payload["jid"] == jid and payload["args"] == ["from-cli"]
    bad = run_jobmaster("enqueue", "-c", str(write_config()), "tests.record", "{nope")
    assert bad.wait(timeout=20) == 2
    assert "argument 0" in bad.log() and "is not JSON" in bad.log()


def test_embedded_redis_serves_workers_and_producers_with_the_same_config(
    run_jobmaster: Run, write_config: Write, short_tmp_dir: Path
) -> None:
    config = write_config(redis_url="embedded", data_dir=str(short_tmp_dir))
    process = run_jobmaster("-c", str(config), env={"JOBMASTER_REDIS_URL": "", "REDIS_URL": ""})
    socket_url = f"unix://{short_tmp_dir}/redis.sock?db=0"
    wait_until(lambda: "started: queues" in process.log(), timeout=30, message="worker up")
    producer = Client("embedded", data_dir=short_tmp_dir)
    producer.push({"job": "tests.count", "args": [1]})
    store = redis.Redis.from_url(socket_url)
    wait_until(lambda: store.get(K.stat("processed")) == b"1", timeout=10)
    process.signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    assert "Embedded redis-server stopped" in process.log()
