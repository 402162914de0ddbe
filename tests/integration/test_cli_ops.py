"""The operator's commands (stats, ps, ctl, queue, dead|retries|scheduled), in process.

CliRunner against the test's private Redis, seeded through the Client, the
API or (for entries only a worker would write) the wire format.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from jobmaster import exitcodes
from jobmaster import payload as wire
from jobmaster.api import DeadSet, Queue, RetrySet, ScheduledSet
from jobmaster.api.stats import utc_day
from jobmaster.cli import main
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests.helpers import wait_until

K = Keys()
FAR = 4_000_000_000.0  # a score no poller reaches during a test
Invoke = Callable[..., Result]


@pytest.fixture
def cli(redis_url: str) -> Invoke:
    """``jobmaster ARGS --redis-url <the test's Redis>``; ``input`` answers prompts."""

    def invoke(*args: str, input: str | None = None, url: bool = True) -> Result:
        extra = ["--redis-url", redis_url] if url else []
        return CliRunner().invoke(main, [*args, *extra], input=input)

    return invoke


def failed_job(name: str, error: str, message: str, **extra: Any) -> dict[str, Any]:
    """A payload as the worker leaves it after a failure."""
    built = wire.build(name, ["x"], {}, queue="default", extra=extra)
    return {
        **built,
        "enqueued_at": time.time(),
        "error_class": error,
        "error_message": message,
        "error_backtrace": ["Traceback (most recent call last):", f"{error}: {message}"],
        "retry_count": 2,
        "failed_at": time.time(),
    }


def zadd(store: redis.Redis, key: str, member: dict[str, Any] | bytes, score: float) -> None:
    raw = member if isinstance(member, bytes) else wire.encode(member)
    store.zadd(key, {raw: score})


@pytest.fixture
def dead(store: redis.Redis) -> dict[str, Any]:
    """Two ValueErrors of tests.fails, a TimeoutError of tests.record, a payload buried
    as garbage by a worker (it has a jid) and a member that is not even JSON."""
    now = time.time()
    entries = {
        "value1": failed_job("tests.fails", "ValueError", "failing on purpose: 1"),
        "value2": failed_job("tests.fails", "ValueError", "failing on purpose: 2"),
        "timeout": failed_job("tests.record", "TimeoutError", "took too long"),
        "buried": wire.buried(b"\xffnot json", "payload is not JSON", "default"),
    }
    for offset, entry in enumerate(entries.values()):
        zadd(store, K.dead, entry, now - 600 + offset)
    zadd(store, K.dead, b"{half a payload", now - 10)
    return entries


def jids(result: Result) -> list[str]:
    assert result.exit_code == 0, result.output
    return [entry["jid"] for entry in json.loads(result.output)]


# -- stats and queue ------------------------------------------------------------
def test_stats_shows_queues_sets_and_counters_as_text_and_json(
    cli: Invoke, client: Client, store: redis.Redis
) -> None:
    old = wire.build("tests.record", ["old"], {}, queue="default")
    store.lpush(K.queue("default"), wire.encode({**old, "enqueued_at": time.time() - 95}))
    store.sadd(K.queues, "default")
    client.push({"job": "tests.record", "args": ["new"]})
    client.push({"job": "tests.record", "args": ["low"], "queue": "low"})
    client.push({"job": "tests.record", "args": ["later"], "at": FAR})
    Queue("low", client).pause()
    zadd(store, K.retry, failed_job("tests.fails", "ValueError", "x"), FAR)
    store.mset({K.stat("processed"): 40, K.stat("failed"): 4})
    today = utc_day(time.time())
    store.mset({K.stat_day("processed", today): 7, K.stat_day("failed", today): 1})

    text = cli("stats")
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert lines[0].split() == ["QUEUE", "SIZE", "LATENCY", "PAUSED"]
    name, size, latency, paused = lines[1].split()
    assert (name, size, paused) == ("default", "2", "no")
    assert re.fullmatch(r"1m3[5-9]s", latency), latency  # the oldest job's age
    assert lines[2].split() == ["low", "1", "0s", "yes"]
    assert "enqueued:  3" in lines
    assert "scheduled: 1" in lines and "retries:   1" in lines and "dead:      0" in lines
    assert "processed: 7 today (UTC), 40 total" in lines
    assert "failed:    1 today (UTC), 4 total" in lines

    data = json.loads(cli("stats", "--json").output)
    assert (data["processed"], data["failed"], data["processed_today"]) == (40, 4, 7)
    assert (data["scheduled_size"], data["retry_size"], data["dead_size"]) == (1, 1, 0)
    assert data["busy"] == 0 and data["processes"] == 0
    by_name = {q["name"]: q for q in data["queues"]}
    assert by_name["low"]["paused"] and not by_name["default"]["paused"]
    assert by_name["default"]["size"] == 2 and 94 < by_name["default"]["latency"] < 120


def test_queue_list_pause_resume_and_clear_with_confirmation(cli: Invoke, client: Client) -> None:
    client.push_bulk({"job": "tests.record", "args": [["a"], ["b"], ["c"]]})
    queue = Queue("default", client)

    assert cli("queue", "pause", "default").output.startswith("default: paused")
    assert queue.is_paused()
    [listed] = json.loads(cli("queue", "list", "--json").output)
    assert listed == {"name": "default", "size": 3, "latency": listed["latency"], "paused": True}
    assert cli("queue", "list").output.splitlines()[1].split()[:2] == ["default", "3"]
    assert cli("queue", "resume", "default").output == "default: resumed\n"
    assert not queue.is_paused()

    refused = cli("queue", "clear", "default", input="n\n")
    assert (
        refused.exit_code == 1 and "Delete the 3 jobs waiting in queue default?" in refused.output
    )
    assert queue.size() == 3
    accepted = cli("queue", "clear", "default", input="y\n")
    assert accepted.exit_code == 0 and accepted.output.endswith("default: deleted 3 jobs\n")
    client.push({"job": "tests.record", "args": ["d"]})
    assert cli("queue", "clear", "default", "--yes").output == "default: deleted 1 job\n"
    assert queue.size() == 0


# -- the sets -------------------------------------------------------------------
def test_dead_list_shows_every_entry_garbage_included_and_filters(
    cli: Invoke, dead: dict[str, Any]
) -> None:
    text = cli("dead", "list")
    assert text.exit_code == 0, text.output
    header, *rows = text.output.splitlines()
    assert header.split() == ["JID", "JOB", "QUEUE", "ERROR", "DIED", "RETRIES"]
    assert len(rows) == 5
    first = rows[0]  # earliest death first
    assert first.startswith(dead["value1"]["jid"]) and "tests.fails" in first
    assert "ValueError: failing on purpose: 1" in first and "10m0" in first
    assert first.endswith("1")  # the retries made: retry_count 2 is two failures, one retry
    assert "BadPayload: payload is not JSON" in rows[3]
    assert rows[4].startswith("-") and "not a payload: {half a payload" in rows[4]

    everything = json.loads(cli("dead", "list", "--json").output)
    assert everything[4] == {
        "jid": None,
        "job": None,
        "queue": None,
        "at": everything[4]["at"],
        "error_class": None,
        "error_message": None,
        "retry_count": 0,
        "retries": 0,
        "runnable": False,
        "raw": "{half a payload",
    }
    assert everything[0]["payload"] == dead["value1"] and everything[0]["runnable"]
    assert jids(cli("dead", "list", "--json", "--job", "tests.fails")) == [
        dead["value1"]["jid"],
        dead["value2"]["jid"],
    ]
    assert jids(cli("dead", "list", "--json", "--error", "TimeoutError")) == [
        dead["timeout"]["jid"]
    ]
    limited = cli("dead", "list", "--limit", "2").output.splitlines()
    assert len(limited) == 4 and limited[-1] == "(first 2 shown: --limit 0 for all)"
    assert len(json.loads(cli("dead", "list", "--json", "--limit", "0").output)) == 5
    assert cli("dead", "list", "--job", "nope").output == "nothing in the dead set matches\n"


def test_show_prints_the_whole_entry_and_the_raw_text_of_garbage(
    cli: Invoke, dead: dict[str, Any]
) -> None:
    jid = dead["value1"]["jid"]
    text = cli("dead", "show", jid)
    assert text.exit_code == 0, text.output
    assert f"jid:      {jid}" in text.output
    assert "error:    ValueError: failing on purpose: 1" in text.output
    assert "runnable: yes" in text.output
    stored = json.loads(text.output.split("entry:\n", 1)[1])
    assert stored == dead["value1"]  # backtrace and all

    garbage = cli("dead", "show", dead["buried"]["jid"])
    assert "raw:      \\xffnot json" in garbage.output
    assert "runnable: no" in garbage.output
    data = json.loads(cli("dead", "show", dead["buried"]["jid"], "--json").output)
    assert data["payload"]["raw_hex"] == b"\xffnot json".hex() and data["runnable"] is False

    missing = cli("dead", "show", "0" * 24)
    assert missing.exit_code == exitcodes.NOT_FOUND
    assert missing.output == f"jobmaster: no entry '{'0' * 24}' in the dead set\n"


def test_retry_and_delete_need_exactly_one_selector(
    cli: Invoke, dead: dict[str, Any], client: Client
) -> None:
    for command in ("retry", "delete"):
        for args in ([], [dead["value1"]["jid"], "--all"], ["--job", "tests.fails", "--all"]):
            result = cli("dead", command, *args)
            assert result.exit_code == 2, (command, args, result.output)
            assert "give exactly one of JID, --job NAME / --error CLASS, or --all" in result.output
    assert DeadSet(client).size() == 5


def test_retry_moves_entries_to_their_queue_by_jid_error_job_or_all(
    cli: Invoke, dead: dict[str, Any], client: Client
) -> None:
    queue, dead_set = Queue("default", client), DeadSet(client)
    one = cli("dead", "retry", dead["timeout"]["jid"])
    assert one.output == "moved 1 entry of the dead set to its queue\n"
    assert queue.find(dead["timeout"]["jid"]) is not None

    by_error = cli("dead", "retry", "--error", "ValueError", "--job", "tests.fails")
    assert by_error.output == "moved 2 entries of the dead set to their queues\n"
    assert queue.size() == 3 and dead_set.size() == 2

    garbage = cli("dead", "retry", dead["buried"]["jid"])
    assert garbage.exit_code == exitcodes.REFUSED and garbage.output.startswith(
        "jobmaster: cannot retry"
    )
    rest = cli("dead", "retry", "--all")
    assert rest.output == (
        "moved 0 entries of the dead set to their queues; 2 not runnable left in place "
        "(delete them)\n"
    )
    gone = cli("dead", "retry", dead["timeout"]["jid"])  # retried already
    assert gone.exit_code == exitcodes.NOT_FOUND and "no entry" in gone.output


def test_delete_by_jid_job_or_all(cli: Invoke, dead: dict[str, Any], client: Client) -> None:
    dead_set = DeadSet(client)
    assert cli("dead", "delete", dead["buried"]["jid"]).output == (
        "deleted 1 entry of the dead set\n"
    )
    assert cli("dead", "delete", "--job", "tests.fails").output == (
        "deleted 2 entries of the dead set\n"
    )
    assert [e.jid for e in dead_set] == [dead["timeout"]["jid"], None]
    assert cli("dead", "delete", dead["buried"]["jid"]).exit_code == exitcodes.NOT_FOUND
    assert cli("dead", "delete", "--all").output == "deleted 2 entries of the dead set\n"
    assert dead_set.size() == 0


def test_kill_moves_retries_and_scheduled_jobs_to_the_dead_set(
    cli: Invoke, client: Client, store: redis.Redis
) -> None:
    retrying = [failed_job("tests.fails", "ValueError", f"v{n}") for n in range(2)]
    retrying.append(failed_job("tests.record", "TimeoutError", "slow"))
    for entry in retrying:
        zadd(store, K.retry, entry, FAR)
    later = client.push({"job": "tests.record", "args": ["later"], "at": FAR})
    dead_set = DeadSet(client)

    assert cli("retries", "kill", retrying[2]["jid"]).output == (
        "moved 1 entry of the retry set to the dead set\n"
    )
    assert cli("retries", "kill", "--error", "ValueError").output == (
        "moved 2 entries of the retry set to the dead set\n"
    )
    assert cli("scheduled", "kill", "--all").output == (
        "moved 1 entry of the scheduled set to the dead set\n"
    )
    assert store.zcard(K.retry) == 0 and store.zcard(K.scheduled) == 0
    killed = {entry.jid: entry for entry in dead_set}
    assert set(killed) == {*(entry["jid"] for entry in retrying), later}
    assert {entry.dead_reason for entry in killed.values()} == {"killed by an operator"}
    assert client.status(str(later)) == "dead"

    missing = cli("retries", "kill", retrying[0]["jid"])  # in the dead set already
    assert missing.exit_code == exitcodes.NOT_FOUND
    assert missing.output == f"jobmaster: no entry {retrying[0]['jid']!r} in the retry set\n"
    assert cli("retries", "kill").exit_code == 2  # a selector is needed
    assert cli("dead", "kill", "--all").exit_code == 2  # the dead set has no kill


def test_clear_asks_first_unless_yes(cli: Invoke, dead: dict[str, Any], client: Client) -> None:
    refused = cli("dead", "clear", input="n\n")
    assert refused.exit_code == 1
    assert "Delete all 5 entries of the dead set?" in refused.output
    no_answer = cli("dead", "clear")  # EOF, as in a script without --yes
    assert no_answer.exit_code == 1 and DeadSet(client).size() == 5
    accepted = cli("dead", "clear", input="y\n")
    assert accepted.output.endswith("deleted 5 entries of the dead set\n")
    assert cli("dead", "clear").output == "the dead set is already empty\n"
    zadd(client.redis, K.retry, failed_job("tests.fails", "ValueError", "x"), FAR)
    assert cli("retries", "clear", "--yes").output == "deleted 1 entry of the retry set\n"


def test_retries_and_scheduled_list_when_due_and_run_now(
    cli: Invoke, client: Client, store: redis.Redis
) -> None:
    later = client.push({"job": "tests.record", "args": ["later"], "at": time.time() + 3600})
    waiting = failed_job("tests.fails", "ValueError", "again")
    zadd(store, K.retry, waiting, time.time() + 125)

    header, row = cli("scheduled", "list").output.splitlines()
    assert "DUE" in header and row.startswith(str(later)) and "in 59m" in row
    header, row = cli("retries", "list").output.splitlines()
    assert "NEXT TRY" in header and "in 2m0" in row and "ValueError: again" in row

    assert cli("scheduled", "retry", str(later)).exit_code == 0
    assert cli("retries", "retry", "--all").output == (
        "moved 1 entry of the retry set to their queues\n"
    )
    assert ScheduledSet(client).size() == RetrySet(client).size() == 0
    assert {r.jid for r in Queue("default", client)} == {later, waiting["jid"]}


# -- ps and ctl without a master --------------------------------------------------
def test_ps_lists_a_lone_worker_and_ctl_reports_unknown_identities(
    cli: Invoke,
    make_config: Callable[..., Config],
    running_worker: Callable[[Config], WorkerProcess],
) -> None:
    assert cli("ps").output == "no live jobmaster processes\n"
    assert json.loads(cli("ps", "--json").output) == []
    assert cli("ctl", "quiet", "--all").output == "quiet: no live master or worker, nothing sent\n"

    running_worker(make_config(concurrency=2))
    listed: list[dict[str, Any]] = []

    def has_heartbeat() -> bool:
        listed[:] = json.loads(cli("ps", "--json").output)
        return bool(listed)

    wait_until(has_heartbeat, timeout=10, message="the worker's heartbeat")
    [worker] = listed
    assert (worker["role"], worker["pid"], worker["capacity"]) == ("worker", os.getpid(), 2)
    header, row = cli("ps").output.splitlines()
    assert header.split() == [
        *("HOST", "PID", "ROLE", "QUEUES", "BUSY", "MEMORY", "STARTED", "QUIET", "IDENTITY")
    ]
    assert row.split()[1:5] == [str(os.getpid()), "worker", "default", "0/2"]
    assert row.split()[-1] == worker["identity"]

    unknown = cli("ctl", "stop", "nohost:1:abc")
    assert unknown.exit_code == exitcodes.NOT_FOUND
    assert unknown.output == (
        "jobmaster: no live process 'nohost:1:abc' (gone, or never was: see `jobmaster ps`)\n"
    )
    for args in ([], [worker["identity"], "--all"]):
        usage = cli("ctl", "quiet", *args)
        assert usage.exit_code == 2 and "give either IDENTITY" in usage.output


# -- config: file, namespace, passwords -------------------------------------------
def test_the_config_file_names_redis_and_namespace(
    cli: Invoke, redis_url: str, tmp_path: Path
) -> None:
    Client(redis_url, namespace="other").push({"job": "tests.record", "args": [1], "queue": "q2"})
    Client(redis_url).push({"job": "tests.record", "args": [2]})
    path = tmp_path / "jobmaster.toml"
    path.write_text(f'redis_url = "{redis_url}"\nnamespace = "other"\n')
    # CLI > env > file: the environment must not name another Redis.
    runner = CliRunner(env={"JOBMASTER_REDIS_URL": "", "REDIS_URL": ""})
    result = runner.invoke(main, ["queue", "list", "--json", "-c", str(path)])
    assert result.exit_code == 0, result.output
    assert [q["name"] for q in json.loads(result.output)] == ["q2"]


def test_an_unreachable_redis_is_one_line_without_its_password(cli: Invoke) -> None:
    result = cli("stats", "--redis-url", "redis://:hunter2@127.0.0.1:1/0", url=False)
    assert result.exit_code == 1
    warning, error = result.output.splitlines()  # the password on the command line: warned
    assert warning.startswith("jobmaster: warning: --redis-url holds a password")
    assert error.startswith("jobmaster: cannot reach Redis at redis://:***@127.0.0.1:1/0")
    assert "hunter2" not in result.output and "Traceback" not in result.output
    bad = cli("dead", "list", "-c", "/nonexistent.toml", url=False)
    assert bad.exit_code == 2
