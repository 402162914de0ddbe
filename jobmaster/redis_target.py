"""Where Redis is and how to reach it: URL, credentials, TLS, Sentinel.

``RedisTarget`` gathers every setting that shapes a connection, so the
master, its children, producers and the CLI build theirs from one value
(``connection.connect`` turns it into a client) and cannot disagree on, say,
the CA file. The load-time checks of these settings are in redis_checks.py.

This module sits below settings.py (which parses addresses with
``split_address``) and config.py: it imports neither, so producers that
reach it through the client do not load the whole settings table, and no
function-level import is needed to dodge a cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote_plus, urlsplit

DEFAULT_URL = "redis://127.0.0.1:6379/0"
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


def mask_url(url: str) -> str:
    """Return ``url`` with its password replaced by ``***``.

    Error messages and logs echo Redis URLs; a password pasted into a CI log
    or a bug report is a leaked password. ``urlsplit`` is not trusted here: a
    password with an unencoded ``#``, ``/``, ``?`` or ``@`` makes it see no
    password at all (``#`` starts a fragment, ``/`` ends the netloc), and the
    URL was printed whole. So the userinfo is everything up to the *last*
    ``@`` (too much is masked when the query holds an ``@``, never too
    little), and the query runs to the end (a Redis URL has no fragment).
    """
    scheme, slashes, rest = url.partition("://")
    if slashes:
        userinfo, at, hostinfo = rest.rpartition("@")
        if at and ":" in userinfo:
            rest = f"{userinfo.partition(':')[0]}:***@{hostinfo}"
    # redis-py also reads a password from the query string: ``?password=...``.
    address, mark, query = rest.partition("?")
    return scheme + slashes + address + mark + _mask_query(query)


def _mask_query(query: str) -> str:
    """``query`` with the value of each ``password=`` field replaced by ``***``."""
    fields = query.split("&")
    for index, item in enumerate(fields):
        name = item.partition("=")[0]
        if unquote_plus(name).strip().lower() == "password":
            fields[index] = f"{name}=***"
    return "&".join(fields)


class RedisSettings(Protocol):
    """What a target is built from: the Redis part of a loaded ``Config``."""

    @property
    def redis_url(self) -> str: ...
    @property
    def data_dir(self) -> str: ...
    @property
    def redis_username(self) -> str: ...
    @property
    def redis_password(self) -> str: ...
    @property
    def redis_ssl_ca_certs(self) -> str: ...
    @property
    def redis_ssl_certfile(self) -> str: ...
    @property
    def redis_ssl_keyfile(self) -> str: ...
    @property
    def redis_ssl_cert_reqs(self) -> str: ...
    @property
    def redis_sentinels(self) -> list[str]: ...
    @property
    def redis_sentinel_master(self) -> str: ...
    @property
    def redis_sentinel_password(self) -> str: ...


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
    def of(cls, config: RedisSettings) -> RedisTarget:
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
