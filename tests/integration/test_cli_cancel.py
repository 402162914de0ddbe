"""``jobmaster cancel JID``: exit codes, ``--json`` and ``-c FILE``, in process
against the test's private Redis (the running case: tests/process/test_cancel.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from jobmaster import exitcodes
from jobmaster.api import Queue
from jobmaster.cli import main
from jobmaster.client import Client
from jobmaster.keys import Keys

pytestmark = pytest.mark.timeout(60)

K = Keys()


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_a_queued_job_is_cancelled_exit_0(redis_url: str) -> None:
    client = Client(redis_url)
    jid = client.push({"job": "tests.record", "args": ["x"]})
    assert jid is not None

    result = run("cancel", jid, "--redis-url", redis_url)

    assert result.exit_code == 0, result.output
    assert result.output == f"{jid}: cancelled (removed from queue default)\n"
    assert Queue("default", client).size() == 0
    assert client.status(jid) == "cancelled"
    stats = run("stats", "--redis-url", redis_url)
    assert "cancelled: 1 total" in stats.output


def test_an_ended_job_exits_7_with_one_line(redis_url: str) -> None:
    client = Client(redis_url)
    jid = client.push({"job": "tests.record", "args": ["x"]})
    assert jid is not None
    assert run("cancel", jid, "--redis-url", redis_url).exit_code == 0

    again = run("cancel", jid, "--redis-url", redis_url)

    assert again.exit_code == exitcodes.REFUSED
    assert again.output == f"jobmaster: {jid}: not cancelled, it has already ended (cancelled)\n"
    unknown = run("cancel", "f" * 24, "--redis-url", redis_url)
    assert unknown.exit_code == exitcodes.NOT_FOUND
    assert "no such job" in unknown.output and "Traceback" not in unknown.output


def test_json_says_what_was_found_and_done(redis_url: str, store: redis.Redis) -> None:
    store.set(K.status("a" * 24), "working")
    running = run("cancel", "a" * 24, "--wait", "0", "--json", "--redis-url", redis_url)
    assert running.exit_code == 0
    assert json.loads(running.output) == {
        "jid": "a" * 24,
        "cancelled": True,
        "status": "working",
        "removed_from": None,
        "ended_as": None,
        "pending": False,
    }
    # No worker confirms it (none runs): not cancelled, as far as anyone knows.
    waited = run("cancel", "a" * 24, "--wait", "0.3", "--json", "--redis-url", redis_url)
    assert waited.exit_code == 1
    assert json.loads(waited.output)["pending"] is True
    unknown = run("cancel", "b" * 24, "--json", "--redis-url", redis_url)
    assert unknown.exit_code == exitcodes.NOT_FOUND
    assert json.loads(unknown.output)["cancelled"] is False


def test_the_config_file_names_redis_and_namespace(redis_url: str, tmp_path: Path) -> None:
    client = Client(redis_url, namespace="other")
    jid = client.push({"job": "tests.record", "args": ["x"], "queue": "q2"})
    assert jid is not None
    path = tmp_path / "jobmaster.toml"
    path.write_text(f'redis_url = "{redis_url}"\nnamespace = "other"\n')

    # CLI > env > file: the environment must not name another Redis.
    runner = CliRunner(env={"JOBMASTER_REDIS_URL": "", "REDIS_URL": ""})
    result = runner.invoke(main, ["cancel", jid, "-c", str(path)])

    assert result.exit_code == 0, result.output
    assert "removed from queue q2" in result.output
    assert client.status(jid) == "cancelled"


def test_an_unreachable_redis_is_one_line_exit_1(free_port: int) -> None:
    result = run("cancel", "a" * 24, "--redis-url", f"redis://127.0.0.1:{free_port}/0")
    assert result.exit_code == 1
    assert result.output.startswith("jobmaster: cannot reach Redis")
