"""TLS to Redis: a real redis-server that speaks only TLS and wants client certificates.

The certificates come from a throwaway CA made for this module (tests/tls.py).
A producer and an in-process worker run jobs over TLS with the settings of a
config file; ``jobmaster check`` with the wrong CA fails in one line that says
what to check; ``redis_ssl_cert_reqs = "none"`` turns the check off; a
producer configured by a URL alone gets the same options from its query
string. tests/process/test_redis_tls.py runs the real master.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
import redis
from click.testing import CliRunner

from jobmaster.cli import main
from jobmaster.client import Client
from jobmaster.config import Config, load_config
from jobmaster.keys import Keys
from jobmaster.worker.context import BACKGROUND_THREADS, pool_size
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import wait_until
from tests.tls import Certificates, TLSRedisServer, make_certificates, serving

pytestmark = pytest.mark.timeout(60)
K = Keys()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, certs: Certificates
) -> Iterator[TLSRedisServer]:
    with serving(tmp_path_factory.mktemp("redis-tls"), certs) as server:
        yield server


@pytest.fixture
def tls_store(tls_server: TLSRedisServer) -> Iterator[redis.Redis]:
    """The test's own view of the TLS server, emptied first."""
    with tls_server.client() as conn:
        conn.flushall()
        yield conn


def write_config(folder: Path, url: str, ca: Path, certs: Certificates, extra: str = "") -> Path:
    path = folder / "jobmaster.toml"
    path.write_text(
        f'redis_url = "{url}"\n'
        f'redis_ssl_ca_certs = "{ca}"\n'
        f'redis_ssl_certfile = "{certs.client_cert}"\n'
        f'redis_ssl_keyfile = "{certs.client_key}"\n'
        'app = ["tests.jobs"]\n'
        "concurrency = 4\n"
        "poll_interval = 0.1\n" + extra
    )
    return path


def check(path: Path) -> tuple[int, str]:
    # The suite's JOBMASTER_REDIS_URL would win over the file's rediss:// URL.
    runner = CliRunner(env={"JOBMASTER_REDIS_URL": "", "REDIS_URL": ""})
    result = runner.invoke(main, ["check", "-c", str(path)])
    return result.exit_code, result.output


def test_a_producer_and_a_worker_run_jobs_over_mutual_tls(
    tls_server: TLSRedisServer,
    tls_store: redis.Redis,
    certs: Certificates,
    tmp_path: Path,
    running_worker: Callable[[Config], WorkerProcess],
) -> None:
    config = load_config(write_config(tmp_path, tls_server.url, certs.ca, certs), env={})
    numbers = list(range(971_000, 971_012))
    producer = Client.from_config(config)
    producer.push_bulk({"job": "tests.slow_count", "args": [[n, 0.2] for n in numbers]})
    assert tls_store.llen(K.queue("default")) == len(numbers)  # pushed over TLS

    worker = running_worker(config)
    pool = worker.ctx.redis.connection_pool
    assert isinstance(pool, redis.ConnectionPool)
    assert issubclass(pool.connection_class, redis.SSLConnection)
    peak = 0

    def all_counted() -> bool:
        nonlocal peak
        # Every processor is busy (12 jobs, 4 threads): the pool must hold them
        # and the background threads without reaching its margin.
        peak = max(peak, len(pool._in_use_connections))
        return all(jobs.COUNTS[n] == 1 for n in numbers)

    wait_until(all_counted, timeout=20, message="jobs run over TLS")
    assert 0 < peak <= config.concurrency + len(BACKGROUND_THREADS) < pool_size(4)
    assert pool.max_connections == pool_size(4)


def test_check_with_the_wrong_ca_fails_in_one_line_naming_the_certificate(
    tls_server: TLSRedisServer, certs: Certificates, tmp_path: Path
) -> None:
    code, output = check(write_config(tmp_path, tls_server.url, certs.wrong_ca, certs))
    assert code == 1, output
    [line] = output.splitlines()
    assert line.startswith(f"jobmaster: cannot reach Redis at {tls_server.url}: ")
    assert "certificate verify failed" in line
    assert "is redis_ssl_ca_certs the CA that signed the server's certificate?" in line
    assert "Traceback" not in output

    code, output = check(write_config(tmp_path, tls_server.url, certs.ca, certs))
    assert code == 0, output
    assert f"redis:       {tls_server.url} (Redis " in output


def test_cert_reqs_none_accepts_any_server_certificate(
    tls_server: TLSRedisServer, certs: Certificates, tmp_path: Path
) -> None:
    # What managed Redis with self-signed certificates needs (Heroku): encrypted, unverified.
    path = write_config(
        tmp_path, tls_server.url, certs.wrong_ca, certs, 'redis_ssl_cert_reqs = "none"\n'
    )
    code, output = check(path)
    assert code == 0, output


def test_a_producer_configured_by_a_url_alone_takes_tls_options_from_its_query(
    tls_server: TLSRedisServer, tls_store: redis.Redis, certs: Certificates
) -> None:
    options = {key: str(value) for key, value in certs.client_options().items()}
    producer = Client(f"{tls_server.url}?{urlencode(options)}")
    jid = producer.push({"job": "tests.count", "args": [1], "at": time.time() + 3600})
    assert jid is not None
    assert tls_store.zcard(K.scheduled) == 1
