"""Redis deployment settings: TLS files, credentials, Sentinel, and the worker's pool.

No server: these check what the settings accept and refuse (each refusal one
line naming the key and where it was set, never echoing a password), and the
redis-py client that ``connect`` builds from them (connections are lazy).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import redis
from redis.sentinel import SentinelConnectionPool

from jobmaster.client import Client
from jobmaster.config import Config, load_config
from jobmaster.connection import connect, describe_error
from jobmaster.errors import ConfigError
from jobmaster.redis_target import RedisTarget, split_address
from jobmaster.worker.context import WorkerContext, pool_size

pytestmark = pytest.mark.timeout(30)

PASSWORD = "p@ss/w#rd%" + "91c4"  # characters a URL would need escaped
SENTINEL_PASSWORD = "sentinel-" + "0d3e"
NODE_PASSWORD = "node-" + "5a1b"


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("not parsed at load time\n")
    return path


def load_toml(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Config:
    path = tmp_path / "jobmaster.toml"
    path.write_text(text)
    return load_config(path, env=env or {})


# --- TLS files ---------------------------------------------------------------------


def test_a_missing_certificate_file_is_refused_naming_the_key_and_the_file(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    with pytest.raises(ConfigError) as caught:
        load_toml(tmp_path, f'redis_url = "rediss://h:1/0"\nredis_ssl_ca_certs = "{missing}"\n')
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'jobmaster.toml'}: 'redis_ssl_ca_certs' ")
    assert str(missing) in message and "no file" in message


def test_a_missing_file_from_the_environment_names_the_variable() -> None:
    env = {"JOBMASTER_REDIS_URL": "rediss://h:1/0", "JOBMASTER_REDIS_SSL_CERTFILE": "nope.pem"}
    with pytest.raises(
        ConfigError, match=r"^environment JOBMASTER_REDIS_SSL_CERTFILE: .*nope\.pem"
    ):
        load_config(None, env=env)


def test_a_tls_setting_beside_a_plain_url_says_where_that_url_came_from(pem: Path) -> None:
    # A platform's REDIS_URL overriding the file's rediss:// URL is the usual cause.
    env = {"REDIS_URL": "redis://:secret@h:1/0", "JOBMASTER_REDIS_SSL_CA_CERTS": str(pem)}
    with pytest.raises(ConfigError) as caught:
        load_config(None, env=env)
    assert str(caught.value) == (
        "environment JOBMASTER_REDIS_SSL_CA_CERTS: redis_ssl_ca_certs is a TLS setting: it needs "
        "a rediss:// redis_url, got redis://:***@h:1/0 (from environment REDIS_URL)"
    )


def test_a_folder_is_not_a_certificate_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'redis_ssl_keyfile' must be the path of a readable"):
        load_toml(tmp_path, f'redis_url = "rediss://h:1/0"\nredis_ssl_keyfile = "{tmp_path}"\n')


def test_relative_tls_files_in_the_file_are_read_from_its_folder(
    pem: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir("/")  # as data_dir: not from the working directory
    config = load_toml(
        tmp_path,
        'redis_url = "rediss://h:1/0"\nredis_ssl_ca_certs = "ca.pem"\n'
        'redis_ssl_certfile = "./ca.pem"\nredis_ssl_keyfile = "../' + tmp_path.name + '/ca.pem"\n'
        'redis_ssl_cert_reqs = "optional"\n',
    )
    assert config.redis_ssl_ca_certs == config.redis_ssl_certfile == str(pem)
    assert config.redis_ssl_keyfile == str(pem)
    assert config.redis_ssl_cert_reqs == "optional"


def test_relative_tls_files_from_the_environment_are_read_from_the_working_directory(
    pem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(pem.parent)
    env = {"JOBMASTER_REDIS_URL": "rediss://h:1/0", "JOBMASTER_REDIS_SSL_CA_CERTS": "ca.pem"}
    assert load_config(None, env=env).redis_ssl_ca_certs == str(pem)


def test_cert_reqs_takes_required_optional_or_none(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'redis_ssl_cert_reqs' must be one of required"):
        load_toml(tmp_path, 'redis_url = "rediss://h:1/0"\nredis_ssl_cert_reqs = "maybe"\n')


@pytest.mark.parametrize("url", ["redis://h:1/0", "embedded", "unix:///tmp/r.sock"])
def test_tls_settings_need_a_rediss_url(url: str, pem: Path, tmp_path: Path) -> None:
    # A forgotten "s" must not send the password in clear to a server meant for TLS.
    with pytest.raises(ConfigError, match=r"'redis_ssl_ca_certs' is a TLS setting: .*rediss://"):
        load_toml(tmp_path, f'redis_url = "{url}"\nredis_ssl_ca_certs = "{pem}"\n')


def test_a_key_file_needs_its_certificate(pem: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'redis_ssl_keyfile' needs redis_ssl_certfile"):
        load_toml(tmp_path, f'redis_url = "rediss://h:1/0"\nredis_ssl_keyfile = "{pem}"\n')


def test_tls_settings_reach_the_ssl_connection(pem: Path) -> None:
    target = RedisTarget(
        url="rediss://h:1/0", ssl_ca_certs=str(pem), ssl_certfile=str(pem), ssl_keyfile=str(pem)
    )
    pool = connect(target).connection_pool
    assert pool.connection_class is redis.SSLConnection
    assert pool.connection_kwargs["ssl_ca_certs"] == str(pem)
    assert pool.connection_kwargs["ssl_certfile"] == str(pem)
    assert pool.connection_kwargs["ssl_cert_reqs"] == "required"


def test_a_cert_reqs_in_the_url_query_still_wins() -> None:
    # Heroku-style rediss://...?ssl_cert_reqs=none keeps working for producers.
    pool = connect(RedisTarget(url="rediss://h:1/0?ssl_cert_reqs=none")).connection_pool
    assert pool.connection_kwargs["ssl_cert_reqs"] == "none"


def test_a_certificate_error_says_what_to_check() -> None:
    try:
        raise ssl.SSLCertVerificationError("certificate verify failed")
    except ssl.SSLError:
        try:
            raise redis.ConnectionError("Error 1 connecting to h:1. certificate verify failed.")
        except redis.ConnectionError as error:
            described = describe_error(error)
    assert "certificate verify failed" in described
    assert "is redis_ssl_ca_certs the CA that signed the server's certificate?" in described


# --- user and password -------------------------------------------------------------


def test_a_password_from_the_environment_needs_no_url_escaping() -> None:
    env = {
        "JOBMASTER_REDIS_URL": "redis://h:1/0",
        "JOBMASTER_REDIS_USERNAME": "app",
        "JOBMASTER_REDIS_PASSWORD": PASSWORD,
    }
    config = load_config(None, env=env)
    kwargs = connect(RedisTarget.of(config)).connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"]) == ("app", PASSWORD)
    assert PASSWORD not in repr(config)
    assert PASSWORD not in config.redis_url_masked
    assert PASSWORD not in repr(RedisTarget.of(config))


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("redis://:old@h:1/0", "redis_password"),
        ("redis://h:1/0?password=old", "redis_password"),
        ("redis://someone@h:1/0", "redis_username"),
    ],
)
def test_a_credential_given_twice_is_refused_without_showing_either(
    url: str, key: str, tmp_path: Path
) -> None:
    env = {"JOBMASTER_REDIS_PASSWORD": PASSWORD, "JOBMASTER_REDIS_USERNAME": "app"}
    with pytest.raises(ConfigError) as caught:
        load_toml(tmp_path, f'redis_url = "{url}"\n', env=env)
    message = str(caught.value)
    variable = "JOBMASTER_REDIS_PASSWORD" if key == "redis_password" else "JOBMASTER_REDIS_USERNAME"
    assert message.startswith(f"environment {variable}: {key} is set and redis_url has a"), message
    assert PASSWORD not in message and "old" not in message


def test_a_password_of_the_wrong_type_is_not_echoed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_toml(tmp_path, "redis_password = 918273645\n")
    assert "918273645" not in str(caught.value)
    assert "'redis_password' must be a string, got a int" in str(caught.value)


# --- Sentinel ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("10.0.0.1:26479", ("10.0.0.1", 26479)),
        ("[::1]:5000", ("::1", 5000)),
        ("s-0.x:1", ("s-0.x", 1)),
    ],
)
def test_sentinel_addresses_are_host_and_port(text: str, address: tuple[str, int]) -> None:
    assert split_address(text) == address


@pytest.mark.parametrize("bad", ["h", "h:", ":26479", "h:0", "h:65536", "h:x", "a b:1", "h:1:"])
def test_a_bad_sentinel_address_is_refused(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'redis_sentinels' (must be|port must)"):
        load_toml(tmp_path, f'redis_sentinels = ["{bad}"]\n')


def test_sentinels_from_the_environment_are_comma_separated() -> None:
    env = {
        "JOBMASTER_REDIS_SENTINELS": "s1:26479, s2:26380",
        "JOBMASTER_REDIS_SENTINEL_MASTER": "jobs",
    }
    config = load_config(None, env=env)
    assert config.redis_sentinels == ["s1:26479", "s2:26380"]
    assert config.redis_sentinel_master == "jobs"


@pytest.mark.parametrize("url", ["embedded", "unix:///tmp/r.sock"])
def test_sentinels_need_a_tcp_url(url: str, tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match="'redis_sentinels' need a redis:// or rediss:// redis_url"
    ):
        load_toml(tmp_path, f'redis_url = "{url}"\nredis_sentinels = ["s1:26479"]\n')


def test_sentinel_client_asks_the_sentinels_and_keeps_db_and_credentials() -> None:
    target = RedisTarget(
        url=f"redis://:{NODE_PASSWORD}@ignored:1/3",
        sentinels=("s1:26479", "[::1]:26380"),
        sentinel_master="jobs",
        sentinel_password=SENTINEL_PASSWORD,
    )
    pool = connect(target, max_connections=7).connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "jobs"
    assert pool.max_connections == 7
    assert pool.connection_kwargs["db"] == 3
    assert pool.connection_kwargs["password"] == NODE_PASSWORD
    assert "host" not in pool.connection_kwargs  # the sentinels say where the primary is
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["host"] for s in sentinels] == ["s1", "::1"]
    assert sentinels[0].connection_pool.connection_kwargs["password"] == SENTINEL_PASSWORD


def test_sentinel_over_tls_encrypts_nodes_and_sentinels(pem: Path) -> None:
    target = RedisTarget(url="rediss://x/0", ssl_ca_certs=str(pem), sentinels=("s1:26479",))
    pool = connect(target).connection_pool
    assert issubclass(pool.connection_class, redis.SSLConnection)
    assert pool.connection_kwargs["ssl_ca_certs"] == str(pem)
    sentinel = pool.sentinel_manager.sentinels[0].connection_pool
    assert issubclass(sentinel.connection_class, redis.SSLConnection)


def test_logs_show_the_sentinels_and_never_a_password() -> None:
    config = load_config(
        None,
        env={
            "JOBMASTER_REDIS_URL": f"rediss://:{NODE_PASSWORD}@x/2",
            "JOBMASTER_REDIS_SENTINELS": "s1:26479,s2:26479",
            "JOBMASTER_REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD,
        },
    )
    shown = config.redis_url_masked
    assert shown == "Sentinel master 'mymaster' via s1:26479,s2:26479 (database 2, TLS)"
    assert SENTINEL_PASSWORD not in repr(config) and NODE_PASSWORD not in shown


def test_the_cli_and_producers_use_the_same_target(tmp_path: Path) -> None:
    config = load_toml(tmp_path, 'redis_sentinels = ["s1:26479"]\nnamespace = "app"\n')
    client = Client.from_config(config)
    assert isinstance(client.redis.connection_pool, SentinelConnectionPool)
    assert client.keys.prefix.startswith("app:")


def test_workers_make_their_settings_the_default_unless_the_app_configured_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobmaster import client as producer

    monkeypatch.setattr(producer, "_default", None)
    config = Config(redis_url="redis://127.0.0.1:1/0", redis_sentinels=["s1:26479"])
    producer.default_from_config(config)
    assert isinstance(producer.default_client().redis.connection_pool, SentinelConnectionPool)

    own = Client("redis://127.0.0.1:1/5")
    monkeypatch.setattr(producer, "_default", own)
    producer.default_from_config(config)
    assert producer.default_client() is own


# --- the worker's pool -----------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 5, 25])
def test_the_worker_pool_has_room_for_every_thread_that_uses_redis(concurrency: int) -> None:
    # processors + main, heartbeat, orphan scan, poller, self-check, wakeup
    # listener, watchdog, cancel requests (its pub/sub and its fallback read),
    # status marks + margin 2
    assert pool_size(concurrency) == concurrency + 10 + 2
    config = Config(redis_url="redis://127.0.0.1:1/0", concurrency=concurrency)
    ctx = WorkerContext.create(config)
    assert ctx.redis.connection_pool.max_connections == concurrency + 12
