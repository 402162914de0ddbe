"""The ``jobmaster`` commands never print the Redis password or the secret key.

Against a private redis-server that requires a password (``requirepass``,
and an ACL user with a password of its own), with a config that holds both
the password and a ``secret_key``: the normal output of check, enqueue,
status and periodic list, every ``--help``, and the error paths (a config
error in a file holding the secrets, a wrong password, an unreachable
server) are collected, with the log records emitted meanwhile, and searched
for the secrets in every encoding (tests/secrets_check.py). The commands run
in process through click's runner: the same code as the console script,
fast enough to cover every path. tests/process/test_secrets.py does the
real master.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from jobmaster.cli import main
from jobmaster.config import load_config
from jobmaster.embedded import RedisServerProcess
from jobmaster.redis_target import mask_url
from tests.secrets_check import assert_no_secret

pytestmark = pytest.mark.timeout(60)

PASSWORD = "pw-" + secrets.token_hex(10)
USER_PASSWORD = "upw-" + secrets.token_hex(10)
SECRET_KEY = "sk-" + secrets.token_urlsafe(24)
WRONG = "wrong-" + secrets.token_hex(8)
SECRETS = {
    "the Redis password": PASSWORD,
    "the ACL user's password": USER_PASSWORD,
    "the secret key": SECRET_KEY,
    "the wrong password": WRONG,
}
# Empty: the suite's guard points JOBMASTER_REDIS_URL at a dead port, and the
# environment would win over the file.
NO_URL_ENV = {"JOBMASTER_REDIS_URL": None, "REDIS_URL": None, "JOBMASTER_SECRET_KEY": None}


@dataclass
class Locked:
    """A server that wants a password, and URLs to it in each spelling."""

    port: int

    def url(self, password: str = PASSWORD, user: str = "") -> str:
        return f"redis://{user}:{password}@127.0.0.1:{self.port}/0"

    def query_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?password={PASSWORD}"


@pytest.fixture
def locked(private_redis: RedisServerProcess) -> Iterator[Locked]:
    with private_redis.client() as admin:
        admin.execute_command(
            "ACL", "SETUSER", "app", "on", f">{USER_PASSWORD}", "~*", "&*", "+@all"
        )
        admin.config_set("requirepass", PASSWORD)
        assert private_redis.port is not None
        yield Locked(private_redis.port)
        # The fixture stops the server with a SHUTDOWN that sends no password.
        admin.config_set("requirepass", "")


def write(path: Path, redis_url: str, extra: str = "", secret_keys: str = "") -> Path:
    """A config holding the password (in ``redis_url``) and the secret key."""
    path.write_text(
        'app = ["tests.jobs"]\n'
        f'redis_url = "{redis_url}"\n'
        f"secret_key = {secret_keys or repr([SECRET_KEY])}\n"
        "processes = 1\n"
        f"{extra}"
        '\n[periodic.nightly]\ncron = "0 3 * * *"\njob = "tests.record"\nargs = ["n"]\n'
    )
    return path


class Outputs:
    """Runs commands and keeps everything they printed (stdout and stderr)."""

    def __init__(self) -> None:
        self.runner = CliRunner()
        self.seen: list[str] = []

    def run(self, *args: str, env: dict[str, str | None] | None = None) -> Result:
        result = self.runner.invoke(main, list(args), env={**NO_URL_ENV, **(env or {})})
        self.seen.append(result.output)  # not the arguments: some hold the secrets on purpose
        return result


@pytest.fixture
def outputs(locked: Locked) -> Outputs:
    return Outputs()


def test_normal_output_never_shows_a_secret(
    locked: Locked, outputs: Outputs, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = str(write(tmp_path / "jobmaster.toml", locked.url()))
    run = outputs.run

    checked = run("check", "-c", config)
    assert checked.exit_code == 0, checked.output
    assert f"redis:       {mask_url(locked.url())} (Redis " in checked.output
    assert "secret_key:  1 key(s)" in checked.output
    for other in (locked.query_url(), locked.url(USER_PASSWORD, user="app")):
        result = run("check", "-c", config, "--redis-url", other)
        assert result.exit_code == 0 and mask_url(other) in result.output, result.output

    enqueued = run("enqueue", "-c", config, "tests.record", '"x"')
    assert enqueued.exit_code == 0, enqueued.output
    status = run("status", "-c", config, enqueued.output.strip())
    assert "queued" in status.output
    assert "nightly: tests.record" in run("periodic", "list", "-c", config).output
    assert run("periodic", "list", "--redis-url", locked.url()).exit_code == 0

    # With the secrets in the environment, where help texts could echo defaults.
    env: dict[str, str | None] = {
        "JOBMASTER_REDIS_URL": locked.url(),
        "JOBMASTER_SECRET_KEY": SECRET_KEY,
    }
    for command in ([], ["run"], ["worker"], ["check"], ["enqueue"], ["status"], ["periodic"]):
        helped = run(*command, "--help", env=env)
        assert helped.exit_code == 0 and "Usage:" in helped.output, helped.output

    everything = "\n".join(outputs.seen) + caplog.text
    assert_no_secret(everything, SECRETS, "the commands' output")


def test_error_output_never_shows_a_secret(
    locked: Locked, outputs: Outputs, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = outputs.run
    good = locked.url()
    broken_files = {
        "a bad value next to them": write(tmp_path / "a.toml", good, 'processes = "many"\n'),
        "a TOML syntax error on the password's line": write(tmp_path / "b.toml", good + '" x="'),
        "a URL of the wrong scheme": write(tmp_path / "c.toml", f"http://:{PASSWORD}@h:1/0"),
        "a URL with a bad port": write(tmp_path / "d.toml", f"redis://:{PASSWORD}@h:bad/0"),
        "a misspelt key holding a secret": write(
            tmp_path / "e.toml", good, f'secrte = "{PASSWORD}"\n'
        ),
        "a short second key": write(
            tmp_path / "f.toml", good, "", secret_keys=f'["{SECRET_KEY}", "short"]'
        ),
    }
    for what, path in broken_files.items():
        result = run("check", "-c", str(path))
        assert result.exit_code == 2, f"{what}: {result.output}"
        assert str(path) in result.output and len(result.output.splitlines()) == 1, what

    config = str(write(tmp_path / "ok.toml", good))
    wrong = locked.url(WRONG)
    for args in (["check", "-c", config], ["enqueue", "-c", config, "tests.record", "1"]):
        refused = run(*args, "--redis-url", wrong)
        assert refused.exit_code == 1, refused.output  # one line, no traceback
        assert "invalid username-password pair" in refused.output, refused.output
    unreachable = run("check", "-c", config, "--redis-url", f"redis://:{PASSWORD}@127.0.0.1:1/0")
    assert unreachable.exit_code == 1 and "127.0.0.1:1" in unreachable.output
    bad_env = run("check", "-c", config, env={"JOBMASTER_REDIS_URL": f"http://:{PASSWORD}@h/0"})
    assert bad_env.exit_code == 2 and "JOBMASTER_REDIS_URL" in bad_env.output
    bad_flag = run("status", "x", "--redis-url", f"tcp://:{PASSWORD}@h/0")
    assert bad_flag.exit_code == 2 and "--redis-url" in bad_flag.output

    everything = "\n".join(outputs.seen) + caplog.text
    assert_no_secret(everything, SECRETS, "the error messages")


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://h:1/0?password=hunter22", "redis://h:1/0?password=***"),
        ("redis://h/0?db=1&Password=hunter22&x=1", "redis://h/0?db=1&Password=***&x=1"),
        ("unix:///tmp/r.sock?db=0&password=hunter22", "unix:///tmp/r.sock?db=0&password=***"),
        ("redis://u:hunter22@h/0?password=hunter22", "redis://u:***@h/0?password=***"),
    ],
)
def test_a_password_in_the_query_string_is_masked_too(url: str, masked: str) -> None:
    """redis-py reads ``?password=`` as it reads the URL's userinfo."""
    assert mask_url(url) == masked


def test_a_printed_config_shows_neither_the_password_nor_the_keys() -> None:
    """A Config ends up in logs, tracebacks and test failures through its repr."""
    config = load_config(
        None, {"redis_url": f"redis://app:{PASSWORD}@h:1/0", "secret_key": [SECRET_KEY]}, env={}
    )
    assert config.redis_url_masked == "redis://app:***@h:1/0"
    assert_no_secret(repr(config) + str(config), SECRETS, "repr(config)")
