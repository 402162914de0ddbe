"""Where Redis is and how to reach it: URL, credentials, TLS, Sentinel.

``RedisTarget`` gathers every setting that shapes a connection, so the
master, its children, producers and the CLI build theirs from one value
(``connection.connect`` turns it into a client) and cannot disagree on, say,
the CA file. ``checked_settings`` refuses at load time a missing TLS file
and the settings that only make sense together, naming the key and where
it was set, before anything is forked.

The settings module is imported lazily: producers import this module
through the client, and they do not need the whole settings table.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import parse_qs, urlsplit

from jobmaster.errors import ConfigError

if TYPE_CHECKING:
    from jobmaster.config import Config

DEFAULT_URL = "redis://127.0.0.1:6379/0"
FILE_KEYS = ("redis_ssl_ca_certs", "redis_ssl_certfile", "redis_ssl_keyfile")
TLS_KEYS = (*FILE_KEYS, "redis_ssl_cert_reqs")
_HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")  # a name, an IPv4 or a [IPv6]
_PORT = re.compile(r"[0-9]{1,5}")


def split_address(text: str) -> tuple[str, int]:
    """``"host:port"`` (``"[::1]:26379"`` for IPv6) as ``(host, port)``, brackets removed."""
    host, colon, port = text.strip().rpartition(":")
    if not colon or not _HOST.fullmatch(host) or not _PORT.fullmatch(port):
        raise ValueError(f'must be "host:port" entries, got {text!r}')
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"port must be 1 to 65535, got {text!r}")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class RedisTarget:
    """One Redis deployment as the settings describe it.

    With ``sentinels``, the primary's address comes from them (and again
    after each failover); ``url`` then gives only the scheme (``rediss://``
    for TLS), the user, the password, the database and query options.
    """

    url: str = field(default=DEFAULT_URL, repr=False)  # may hold a password
    data_dir: str = ".jobmaster"
    username: str = ""
    password: str = field(default="", repr=False)
    ssl_ca_certs: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_cert_reqs: str = "required"
    sentinels: tuple[str, ...] = ()
    sentinel_master: str = "mymaster"
    sentinel_password: str = field(default="", repr=False)

    @classmethod
    def of(cls, config: Config) -> RedisTarget:
        """The target a loaded config describes."""
        return cls(
            url=config.redis_url,
            data_dir=config.data_dir,
            username=config.redis_username,
            password=config.redis_password,
            ssl_ca_certs=config.redis_ssl_ca_certs,
            ssl_certfile=config.redis_ssl_certfile,
            ssl_keyfile=config.redis_ssl_keyfile,
            ssl_cert_reqs=config.redis_ssl_cert_reqs,
            sentinels=tuple(config.redis_sentinels),
            sentinel_master=config.redis_sentinel_master,
            sentinel_password=config.redis_sentinel_password,
        )

    @property
    def uses_tls(self) -> bool:
        return self.url.lower().startswith("rediss://")

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [split_address(entry) for entry in self.sentinels]

    def shown(self) -> str:
        """What logs and errors say about this target: no password, ever."""
        from jobmaster.settings import mask_url

        if not self.sentinels:
            return mask_url(self.url)
        tls = ", TLS" if self.uses_tls else ""
        return (
            f"Sentinel master {self.sentinel_master!r} via {','.join(self.sentinels)} "
            f"(database {_database(self.url)}{tls})"
        )

    def tls_options(self) -> dict[str, Any]:
        """redis-py's ``ssl_*`` arguments; a CA or client certificate left unset
        means the system's CAs and no client certificate."""
        options: dict[str, Any] = {"ssl_cert_reqs": self.ssl_cert_reqs}
        for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
            if getattr(self, name):
                options[name] = getattr(self, name)
        return options

    def client_options(self) -> dict[str, Any]:
        """Credentials and TLS for the Redis nodes (redis-py keyword arguments).

        redis-py lets the URL win over these, as it does for every option its
        query string may carry (``?ssl_cert_reqs=none``); ``checked_settings``
        refuses a user or password given both ways, so that cannot surprise.
        """
        options: dict[str, Any] = {}
        if self.username:
            options["username"] = self.username
        if self.password:
            options["password"] = self.password
        if self.uses_tls:
            options.update(self.tls_options())
        return options

    def sentinel_options(self) -> dict[str, Any]:
        """How to talk to the sentinels themselves: their password, and TLS when
        the nodes use it (deployments encrypt both or neither)."""
        options: dict[str, Any] = {}
        if self.sentinel_password:
            options["password"] = self.sentinel_password
        if self.uses_tls:
            options.update(ssl=True, **self.tls_options())
        return options


def _database(url: str) -> int:
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query).get("db")
        return int(query[0] if query else (parts.path.strip("/") or 0))
    except ValueError:
        return 0


# --- checks at load time ---------------------------------------------------------


class _Sources:
    """Where the value in force of each setting was set, to name it in an error."""

    def __init__(
        self, file_label: str | None, env: Mapping[str, str], overrides: Mapping[str, Any]
    ) -> None:
        from jobmaster.settings import SETTINGS

        self.settings = SETTINGS
        self.file_label = file_label
        self.env = env
        self.overrides = overrides

    def of(self, key: str) -> str:
        """An option, a variable, the file, or the default."""
        setting = self.settings[key]
        if self.overrides.get(key) not in (None, [], ()):
            return f"option {setting.option or key}"
        for var in setting.env_vars:
            if self.env.get(var, "").strip():
                return f"environment {var}"
        return self.file_label or "the default"

    def refuse(self, key: str, message: str) -> NoReturn:
        where = self.of(key)
        prefix = f"{where}: {key!r}" if where == self.file_label else f"{where}: {key}"
        raise ConfigError(f"{prefix} {message}")


def checked_settings(
    values: Mapping[str, Any],
    *,
    base: str,
    file_label: str | None,
    env: Mapping[str, str],
    overrides: Mapping[str, Any],
) -> dict[str, Any]:
    """The TLS files of ``values``, checked and made absolute; ``ConfigError`` for a
    missing one or for Redis settings that contradict each other.

    A relative path in the file is read from the file's folder, as
    ``data_dir`` is; from the environment, from the working directory. Each
    error blames one key that was set on purpose, and says where it was set.
    """
    sources = _Sources(file_label, env, overrides)
    files = {}
    for key in FILE_KEYS:
        if values[key]:
            folder = base if sources.of(key) == file_label else os.getcwd()
            files[key] = _readable(str(values[key]), folder, key, sources)
    _check_combinations(values, sources)
    return files


def _readable(text: str, folder: str, key: str, sources: _Sources) -> str:
    """``text`` as an absolute path to a file this process can read.

    Checked now so that a mistyped certificate path is a config error naming
    the key, not a TLS failure in every child; absolute so that every process
    opens the same file, whatever its working directory.
    """
    try:
        full = os.path.abspath(os.path.join(folder, os.path.expanduser(text)))
    except ValueError:  # a name the file system cannot encode
        sources.refuse(key, f"must be the path of a readable file, got {text!r}")
    if not os.path.isfile(full):
        sources.refuse(key, f"must be the path of a readable file, got {text!r}: no file {full!r}")
    if not os.access(full, os.R_OK):
        sources.refuse(key, f"must be the path of a readable file, got {text!r}: cannot read it")
    return full


def _check_combinations(values: Mapping[str, Any], sources: _Sources) -> None:
    from jobmaster.settings import mask_url

    url = str(values["redis_url"])
    scheme = "embedded" if url == "embedded" else urlsplit(url).scheme.lower()
    tls_set = [key for key in TLS_KEYS if values[key] != sources.settings[key].default]
    if tls_set and scheme != "rediss":
        # A forgotten "s" would send the password in clear to a server that
        # the operator meant to reach over TLS.
        sources.refuse(
            tls_set[0],
            f"is a TLS setting: it needs a rediss:// redis_url, got {mask_url(url)} "
            f"(from {sources.of('redis_url')})",
        )
    if values["redis_ssl_keyfile"] and not values["redis_ssl_certfile"]:
        sources.refuse("redis_ssl_keyfile", "needs redis_ssl_certfile, the certificate of that key")
    if values["redis_sentinels"] and scheme not in ("redis", "rediss"):
        sources.refuse(
            "redis_sentinels",
            "need a redis:// or rediss:// redis_url (for the database, user and password), "
            f"got {mask_url(url)}",
        )
    in_url = _credentials_in(url) if scheme in ("redis", "rediss", "unix") else set()
    for key, what in (("redis_username", "user"), ("redis_password", "password")):
        if values[key] and what in in_url:
            sources.refuse(key, f"is set and redis_url has a {what} too: keep one of them")


def _credentials_in(url: str) -> set[str]:
    """Which of "user" and "password" a URL carries (redis-py also reads ``?password=``)."""
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        found = set()
        if parts.username or query.get("username"):
            found.add("user")
        if parts.password or query.get("password"):
            found.add("password")
        return found
    except ValueError:
        return set()
