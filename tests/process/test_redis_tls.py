"""The real ``jobmaster`` master and ``jobmaster check`` against a TLS-only Redis.

The server wants client certificates (tests/tls.py makes a throwaway CA).
The master, its children and a producer reach it with the settings of one
config file; the test jobs record their runs on the suite's plain server
(JOBMASTER_REDIS_URL), so a marker there means a job fetched over TLS ran.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from jobmaster.client import Client
from jobmaster.config import load_config
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command, wait_for_worker
from tests.tls import Certificates, TLSRedisServer, make_certificates, serving

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]
K = Keys()


@pytest.fixture
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, certs: Certificates
) -> Iterator[TLSRedisServer]:
    with serving(tmp_path_factory.mktemp("redis-tls"), certs) as server:
        yield server


def tls_settings(certs: Certificates, ca: Path) -> dict[str, object]:
    return {
        "redis_ssl_ca_certs": str(ca),
        "redis_ssl_certfile": str(certs.client_cert),
        "redis_ssl_keyfile": str(certs.client_key),
    }


def test_a_real_master_runs_jobs_over_tls(
    tls_server: TLSRedisServer,
    certs: Certificates,
    store: redis.Redis,
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
) -> None:
    config = write_config(redis_url=tls_server.url, processes=2, **tls_settings(certs, certs.ca))
    # --redis-url: the fixture's JOBMASTER_REDIS_URL (the plain server, for
    # the markers) would otherwise win over the file's rediss:// URL.
    master = run_jobmaster("-c", str(config), "--redis-url", tls_server.url)
    with tls_server.client() as tls_store:
        wait_for_worker(tls_store, master)
        producer = Client.from_config(load_config(config, env={}))
        markers = [f"tls-{n}" for n in range(20)]
        producer.push_bulk({"job": "tests.record", "args": [[m] for m in markers]})
        wait_until(
            lambda: {m.encode() for m in markers} <= store.smembers("test:done"),
            timeout=20,
            message=f"jobs run over TLS:\n{master.log()}",
        )
        assert tls_store.llen(K.queue("default")) == 0
        master.signal(signal.SIGTERM)
        assert master.wait(timeout=20) == 0, master.log()
    assert "Traceback" not in master.log()


def test_check_with_the_wrong_ca_exits_1_with_one_line_and_no_traceback(
    tls_server: TLSRedisServer, certs: Certificates, write_config: Callable[..., Path]
) -> None:
    config = write_config(redis_url=tls_server.url, **tls_settings(certs, certs.wrong_ca))
    done = subprocess.run(
        [jobmaster_command(), "check", "-c", str(config)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},  # no JOBMASTER_REDIS_URL: the file's URL is used
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"jobmaster: cannot reach Redis at {tls_server.url}: "), line
    assert "certificate verify failed" in line and "redis_ssl_ca_certs" in line, line
    assert "Traceback" not in done.stdout + done.stderr
