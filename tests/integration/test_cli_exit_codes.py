"""The exit-code table (jobmaster/exitcodes.py) over the whole command tree,
on a real Redis: Redis unreachable is 1 and a name that does not exist is 6,
for every command that reaches Redis or looks a name up.

``status`` of an unknown jid exited 0 and ``cancel`` of an ended job 1, like
a Redis outage: a script could not tell them apart. The tree is walked
(tests/cli_tree.py); a command left out must say why below.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from jobmaster import exitcodes
from jobmaster.cli import main
from tests.cli_tree import PATHS, arguments

pytestmark = pytest.mark.timeout(60)

# Commands that never reach Redis in process, and why; each is tested elsewhere.
NO_REDIS_HERE = {
    ("run",): "starts a master (forks): tests/process",
    ("worker",): "serves jobs until stopped: tests/process/test_worker_command.py",
    ("web",): "serves HTTP until stopped; it answers while Redis is down: tests/web",
}
# Commands whose argument is not looked up, and why.
NOT_A_LOOKUP = {
    (
        "enqueue",
    ): "JOB is a name to push (an unregistered one is 7: tests/process/test_app_path.py)",
    ("queue", "pause"): "a queue exists by its name alone (it appears with its first job)",
    ("queue", "resume"): "a queue exists by its name alone",
    ("queue", "clear"): "a queue exists by its name alone (clearing none is 0)",
}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize("path", [p for p in PATHS if p not in NO_REDIS_HERE], ids=" ".join)
def test_redis_unreachable_is_1(path: tuple[str, ...], free_port: int) -> None:
    url = f"redis://127.0.0.1:{free_port}/0"
    code, output = invoke(*path, *arguments(path), "--redis-url", url)
    assert code == exitcodes.RUNTIME_FAILURE, output
    assert output.splitlines()[-1].startswith("jobmaster: "), output
    assert "Traceback" not in output


LOOKUPS = [p for p in PATHS if arguments(p) and p not in NOT_A_LOOKUP]


def test_every_command_with_an_argument_is_a_lookup_or_says_why() -> None:
    assert {("status",), ("cancel",), ("dead", "show"), ("ctl", "stop")} <= set(LOOKUPS)
    assert set(NO_REDIS_HERE) | set(NOT_A_LOOKUP) <= set(PATHS)


@pytest.mark.parametrize("path", LOOKUPS, ids=" ".join)
def test_a_name_that_does_not_exist_is_6(path: tuple[str, ...], redis_url: str) -> None:
    code, output = invoke(*path, *arguments(path), "--redis-url", redis_url)
    assert code == exitcodes.NOT_FOUND, output
    assert "Traceback" not in output


def test_an_ended_job_cannot_be_cancelled_7(redis_url: str) -> None:
    from jobmaster.client import Client

    jid = Client(redis_url).push({"job": "tests.record", "args": ["x"]})
    assert jid is not None
    assert invoke("cancel", jid, "--redis-url", redis_url)[0] == exitcodes.OK
    assert invoke("cancel", jid, "--redis-url", redis_url)[0] == exitcodes.REFUSED
    assert invoke("status", jid, "--redis-url", redis_url)[0] == exitcodes.OK
