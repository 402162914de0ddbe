"""The real master's log never shows the Redis password or the secret key.

A private redis-server wants a password: ``requirepass`` for the text run,
an ACL user with a password for the JSON run. The config holds that
password (in ``redis_url``) and a ``secret_key``, logs at debug level, and
the master goes through start, plain, encrypted and failing jobs (retried,
then dead), a periodic entry, a rolling restart (HUP) and a graceful stop
(TERM). Everything it printed, and what ``jobmaster status`` and
``periodic list`` print about those jobs, is searched for the secrets in
every encoding (tests/secrets_check.py), and for the encrypted argument.
tests/integration/test_secrets_cli.py covers the other commands and the
error paths.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import jobmaster
from jobmaster import crypto
from jobmaster.embedded import RedisServerProcess
from jobmaster.keys import Keys
from tests import jobs
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command, wait_for_worker
from tests.secrets_check import assert_no_secret

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]
K = Keys()
PASSWORD = "pw-" + secrets.token_hex(10)
SECRET_KEY = "sk-" + secrets.token_urlsafe(24)
CARD = "4111-" + secrets.token_hex(6)  # an encrypted job's argument: never in clear either
SECRETS = {"the Redis password": PASSWORD, "the secret key": SECRET_KEY, "the card": CARD}


@pytest.fixture
def server(private_redis: RedisServerProcess) -> Iterator[RedisServerProcess]:
    """The private server, wanting PASSWORD from the default user and from "app"."""
    with private_redis.client() as admin:
        admin.execute_command("ACL", "SETUSER", "app", "on", f">{PASSWORD}", "~*", "&*", "+@all")
        admin.config_set("requirepass", PASSWORD)
        yield private_redis
        admin.config_set("requirepass", "")  # the fixture's SHUTDOWN sends no password


@pytest.fixture
def producer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """``jobmaster.configure`` for this test only (encrypted jobs need the key)."""
    monkeypatch.setattr(jobmaster.client, "_default", None)
    yield lambda url: jobmaster.configure(url, secret_key=SECRET_KEY)
    crypto.set_keys(None)


def command_output(*args: str, url: str) -> str:
    done = subprocess.run(
        [jobmaster_command(), *args],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "JOBMASTER_REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize(("log_format", "user"), [("text", ""), ("json", "app")])
def test_the_masters_log_holds_no_secret(
    log_format: str,
    user: str,
    server: RedisServerProcess,
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
    producer: Callable[[str], None],
) -> None:
    url = f"redis://{user}:{PASSWORD}@127.0.0.1:{server.port}/0"
    store = redis.Redis.from_url(url)
    config = write_config(
        redis_url=url,
        secret_key=[SECRET_KEY],
        log_level="debug",
        log_format=log_format,
        processes=1,
        periodic={"tick": {"every": 1, "job": "tests.record", "args": ["periodic"]}},
    )
    master = run_jobmaster("-c", str(config), env={"JOBMASTER_REDIS_URL": url})
    wait_for_worker(store, master)

    producer(url)
    jobs.record.enqueue("plain")
    jobs.encrypted.enqueue("sealed", card=CARD)
    failed_jid = jobs.encrypted.enqueue("sealed-fails", card=CARD, fail=True)
    jobs.fails.enqueue("fails")
    wait_until(lambda: store.hget("test:encrypted", "sealed") == CARD.encode(), timeout=20)
    wait_until(lambda: {b"plain", b"periodic"} <= store.smembers("test:done"), timeout=20)
    wait_until(lambda: store.zcard(K.dead) == 2, timeout=20, message="both failures dead")

    master.signal(signal.SIGHUP)
    wait_until(lambda: "stopped (replaced (HUP))" in master.log(), timeout=20, message="HUP")
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0, master.log()

    log = master.log()
    for expected in ("start", "failed after", "dead", "rolling restart", "master stopped"):
        assert expected in log, f"{expected!r} missing: is the run logging what it should?"
    status = command_output("status", failed_jid or "", url=url)
    assert "dead" in status and "RuntimeError" in status, status
    periodic = command_output("periodic", "list", "-c", str(config), url=url)
    assert "tick: tests.record" in periodic, periodic
    assert_no_secret(log, SECRETS, f"the master's {log_format} log")
    assert_no_secret(status + periodic, SECRETS, "jobmaster status and periodic list")
