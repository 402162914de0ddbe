"""Every setting of jobmaster, in one table.

The config file, the environment, the CLI flags and the reference table
of docs/configuration.md are all read from ``SETTINGS``, so a setting
cannot exist in one place and be missing (or differently spelled, or
differently defaulted) in another.

Each setting's parser takes a raw value, which is already typed when it comes
from TOML and is a string when it comes from the environment or the command
line, and returns the normalised value or raises ``ValueError`` with a message
that ends in what it got ("must be an integer >= 1, got 0"). The caller adds
where the value came from (file and key, environment variable, option).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from jobmaster import queue_names
from jobmaster.environment import REDIS_URL_VARS
from jobmaster.redis_target import DEFAULT_URL, mask_url, split_address

Parser = Callable[[object], Any]


@dataclass(frozen=True)
class Setting:
    """One setting: its name, default, documentation and how to read it."""

    name: str
    default: Any
    help: str
    parse: Parser
    env: str | None = None
    cli: tuple[str, ...] = ()
    # Read after ``env`` when that is unset: REDIS_URL is what Heroku and most
    # platforms set, but JOBMASTER_REDIS_URL must be able to override it.
    env_fallbacks: tuple[str, ...] = ()
    # A list setting: the CLI option is repeatable and an environment value is
    # split on commas.
    multiple: bool = False
    # How the README shows the default when the value itself would mislead
    # (``processes = None`` means "as many as there are usable CPUs").
    default_doc: str | None = None
    # How ``--help`` shows the flag's value and its range, as click shows its
    # own types ("INTEGER RANGE", "[x>=1]"); the value is still checked by
    # ``parse``, so a bad one gets the same message as in the file or env.
    metavar: str = "TEXT"
    bounds: str = ""

    @property
    def env_vars(self) -> tuple[str, ...]:
        """The environment variables that set this, strongest first."""
        return ((self.env,) if self.env else ()) + self.env_fallbacks

    @property
    def option(self) -> str | None:
        """The long CLI flag (``--processes``), used to name it in errors."""
        longs = [flag for flag in self.cli if flag.startswith("--")]
        return longs[0] if longs else None


# --- parsers -----------------------------------------------------------------


def _got(value: object) -> str:
    return f"got {value!r}"


def _integer(value: object, minimum: int) -> int:
    """An int from TOML or a decimal string; TOML ``true`` is not an int."""
    message = f"must be an integer >= {minimum}, {_got(value)}"
    if isinstance(value, bool):
        raise ValueError(message)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(message) from None
    if not isinstance(value, int) or value < minimum:
        raise ValueError(message)
    return value


def integer(minimum: int) -> Parser:
    return lambda value: _integer(value, minimum)


def number(minimum: float, *, exclusive: bool = False) -> Parser:
    """A float (ints accepted: ``timeout = 25`` is fine TOML) above a bound."""

    def parse(value: object) -> float:
        bound = f"> {minimum:g}" if exclusive else f">= {minimum:g}"
        message = f"must be a number {bound}, {_got(value)}"
        if isinstance(value, bool):
            raise ValueError(message)
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ValueError(message) from None
        if not isinstance(value, int | float):
            raise ValueError(message)
        try:
            value = float(value)  # TOML integers have no limit: 10**400 overflows here
        except OverflowError:
            raise ValueError(message) from None
        if not math.isfinite(value):
            raise ValueError(message)
        if value < minimum or (exclusive and value == minimum):
            raise ValueError(message)
        return float(value)

    return parse


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"must be true or false, {_got(value)}")


def loop_kind(value: object) -> str:
    """``async_loop``: refused here, in the master (and ``jobmaster check``),
    when it names uvloop and uvloop is not installed: each child would fail
    at its start, and the master fork them again and again."""
    kind = str(choice("auto", "uvloop", "asyncio")(value))
    if kind == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise ValueError(
            "uvloop is not installed (pip install 'jobmaster[uvloop]'); "
            'use "auto" (uvloop when installed) or "asyncio"'
        )
    return kind


def choice(*options: str) -> Parser:
    """One of ``options``, case-insensitive, stored lower case."""

    def parse(value: object) -> str:
        if isinstance(value, str) and value.strip().lower() in options:
            return value.strip().lower()
        raise ValueError(f"must be one of {', '.join(options)}, {_got(value)}")

    return parse


def string(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, {_got(value)}")
    return value


def path(value: object) -> str:
    """A file system path: a NUL would only fail later, in os calls, as a traceback."""
    text = string(value)
    if "\x00" in text:
        raise ValueError(f"must be a path without NUL characters, {_got(value)}")
    return text


def paths(value: object) -> list[str]:
    """A list of folder paths: a bare string is refused, since a comma or a
    space may be part of a path and no split of it can be trusted."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f'must be a list of paths such as ["src"], {_got(value)}')
    return [path(item) for item in value]


def _items(value: object, what: str) -> list[str]:
    """A list of strings, or a comma-separated string (env values).

    Commas split list items too, so ``-q critical:3,default`` works like two
    ``-q`` options; no module or queue name contains a comma.
    """
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"must be a list of {what}, {_got(value)}")
    return [part.strip() for item in value for part in item.split(",") if part.strip()]


def import_paths(value: object) -> list[str]:
    """``module:Class`` (or ``module.Class``) entries, e.g. for middleware."""
    items = _items(value, "import paths")
    for item in items:
        if not re.fullmatch(r"[A-Za-z_][\w.]*[:.][A-Za-z_]\w*", item):
            raise ValueError(f'must be "module:Class" entries, got {item!r}')
    return items


def modules(value: object) -> list[str]:
    names = _items(value, "module names")
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"must be a list of module names, got {name!r}")
    return names


def queue_name(name: object) -> str:
    """A queue name, by the one rule of queue_names.py."""
    try:
        return queue_names.queue_name(name)
    except ValueError as error:
        raise ValueError(f"queue names {error}") from None


def queues(value: object) -> list[str]:
    """``["critical:3", "default"]``: names with optional weights >= 1."""
    entries = _items(value, '"name" or "name:weight" strings')
    if not entries:
        raise ValueError("must list at least one queue")
    seen: set[str] = set()
    result = []
    for raw in entries:
        entry = raw
        name, colon, weight = raw.partition(":")
        queue_name(name)
        if colon:
            try:
                number_ = _integer(weight, 1)
            except ValueError:
                raise ValueError(
                    f"queue {name!r}: weight must be an integer >= 1, got {weight!r}"
                ) from None
            entry = f"{name}:{number_}"
        if name in seen:
            raise ValueError(f"queue {name!r} is listed twice")
        seen.add(name)
        result.append(entry)
    return result


def processes(value: object) -> int | None:
    """An int >= 1; ``"auto"`` lets env/CLI restore the default over a file value."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return _integer(value, 1)


def max_child_mb(value: object) -> int | str:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return _integer(value, 0)
    except ValueError:
        raise ValueError(f'must be an integer >= 0 or "auto", {_got(value)}') from None


_REDIS_SCHEMES = ("redis", "rediss", "unix")


def redis_url(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    if value.strip().lower() == "embedded":
        return "embedded"
    try:
        scheme = urlsplit(value).scheme
        urlsplit(value).port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        scheme = ""
    if scheme not in _REDIS_SCHEMES:
        schemes = ", ".join(f"{s}://" for s in _REDIS_SCHEMES)
        raise ValueError(f'must be "embedded" or a {schemes} URL, got {mask_url(value)!r}')
    return value


def secret(value: object) -> str:
    """A password: any string, never echoed in an error (errors end up in logs)."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got a {type(value).__name__}")
    return value


def sentinels(value: object) -> list[str]:
    """``["host:port", ...]`` (or comma-separated, from the environment)."""
    entries = _items(value, '"host:port" strings')
    for entry in entries:
        split_address(entry)
    return entries


def sentinel_master(value: object) -> str:
    if isinstance(value, str) and value.isprintable() and re.fullmatch(r"\S+", value):
        return value
    raise ValueError(f"must be the name the sentinels monitor, without spaces, {_got(value)}")


def namespace(value: object) -> str:
    # Braces would break the one-hash-slot {tag} that keeps Lua cluster-safe.
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_.:-]+", value):
        return value
    raise ValueError(f"must be letters, digits, '_', '.', ':' or '-' (no braces), {_got(value)}")


def crash_queue(value: object) -> str:
    text = string(value)
    return queue_name(text) if text else ""


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def logger_levels(value: object) -> dict[str, str]:
    """``{"logger.name": "level"}``: a ``[log_levels]`` table, or ``name=level,...`` (env).

    An unquoted dotted TOML key (``jobmaster.worker.executor = "warning"``)
    arrives as nested tables: it is flattened back into the logger's name
    rather than refused, since that is what whoever wrote it meant.
    """
    if isinstance(value, str):
        pairs = [item.partition("=") for item in value.split(",") if item.strip()]
        if any(not sign for _, sign, _ in pairs):
            raise ValueError(f'must be "logger=level" entries separated by commas, {_got(value)}')
        value = {name.strip(): level for name, _, level in pairs}
    if not isinstance(value, dict):
        raise ValueError(f'must be a table of "logger" = "level", {_got(value)}')
    levels: dict[str, str] = {}
    for name, level in _flatten(value, ""):
        if not name:
            raise ValueError(f"must name each logger, {_got(value)}")
        try:
            levels[name] = choice(*LOG_LEVELS)(level)
        except ValueError as exc:
            raise ValueError(f"entry {name!r} {exc}") from None
    return levels


def _flatten(table: dict[Any, Any], prefix: str) -> list[tuple[str, object]]:
    """``(dotted name, value)`` pairs; a loop, not recursion: TOML may nest deeply."""
    items: list[tuple[str, object]] = []
    pending: list[tuple[str, dict[Any, Any]]] = [(prefix, table)]
    while pending:
        base, current = pending.pop()
        for key, value in current.items():
            name = f"{base}{str(key).strip()}"
            if isinstance(value, dict) and value:
                pending.append((f"{name}.", value))
            else:
                items.append((name, value))
    return items


def port(value: object) -> int:
    """A TCP port, 0 for "off"."""
    number_ = _integer(value, 0)
    if number_ > 65535:
        raise ValueError(f"must be a port from 0 to 65535, {_got(value)}")
    return number_


def host(value: object) -> str:
    """A host name or IP address to listen on (IPv6 without brackets)."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_.:%-]+", value.strip()):
        return value.strip()
    raise ValueError(f'must be a host name or an IP address such as "127.0.0.1", {_got(value)}')


def host_names(value: object) -> list[str]:
    """Names a Host header may give: ``jobs.example.com``, an IP address,
    ``*.example.com`` (a domain's names) or ``*`` (any: the check is off)."""
    names = _items(value, "host names")
    for name in names:
        bare = name[2:] if name.startswith("*.") else name
        if name != "*" and not re.fullmatch(r"\[?[A-Za-z0-9_.:%-]+\]?", bare):
            raise ValueError(f'must be host names such as "jobs.example.com", got {name!r}')
    return names


def proxy_addresses(value: object) -> list[str]:
    """Addresses or networks of trusted proxies: ``127.0.0.1``, ``10.0.0.0/8``, ``::1``
    (checked here, so a typo is a config error, not a proxy silently untrusted)."""
    found = _items(value, "proxy addresses")
    for item in found:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(
                f'must be IP addresses or networks such as "127.0.0.1" or "10.0.0.0/8", '
                f"got {item!r}"
            ) from None
    return found


MIN_SECRET_LENGTH = 16
MIN_PASSWORD_LENGTH = 12  # web_password: typed by people, throttled (web/throttle.py)


def web_password(value: object) -> str:
    """A password of at least ``MIN_PASSWORD_LENGTH`` characters, or none."""
    text = secret(value)
    if text and len(text) < MIN_PASSWORD_LENGTH:
        raise ValueError(f"must be at least {MIN_PASSWORD_LENGTH} characters, has {len(text)}")
    return text


def web_token(value: object) -> str:
    """``"auto"``, a token of at least ``MIN_SECRET_LENGTH`` characters, or none."""
    text = secret(value)
    if text.strip().lower() == "auto":
        return "auto"
    if text and len(text) < MIN_SECRET_LENGTH:
        raise ValueError(
            f'must be "auto" or at least {MIN_SECRET_LENGTH} random characters, has {len(text)}'
        )
    return text


def cookie_secure(value: object) -> str:
    """``"auto"``, or true or false, stored as ``"true"``/``"false"``."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return "true" if boolean(value) else "false"
    except ValueError:
        raise ValueError(f'must be "auto", true or false, {_got(value)}') from None


def secret_keys(value: object) -> list[str]:
    """Secrets, first one sealing: a list, or one string split on commas (env values).

    Messages never echo the value: it is a secret, and errors end up in logs.
    """
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"must be a string or a list of strings, got a {type(value).__name__}")
    keys = [item.strip() for item in value if item.strip()]
    for number_, key in enumerate(keys, 1):
        if len(key) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"each key must be at least {MIN_SECRET_LENGTH} random characters, "
                f"key {number_} has {len(key)}"
            )
    return keys


# --- the table -----------------------------------------------------------------

_ALL = [
    Setting(
        name="app",
        default=[],
        help="Modules to import (in the master, before forking) that define the jobs.",
        parse=modules,
        cli=("-a", "--app"),
        multiple=True,
        metavar="MODULE",
    ),
    Setting(
        name="pythonpath",
        default=[],
        help="Folders put on sys.path before the app is imported, relative to the config "
        "file (the current folder and the config file's folder always are).",
        parse=paths,
    ),
    Setting(
        name="middleware",
        default=[],
        help='Middleware for every job, as "module:Class" (instantiated without arguments).',
        parse=import_paths,
        multiple=True,
    ),
    Setting(
        name="redis_url",
        default=DEFAULT_URL,
        help='Redis to use, or "embedded" to run a private redis-server in data_dir.',
        parse=redis_url,
        env=REDIS_URL_VARS[0],
        env_fallbacks=REDIS_URL_VARS[1:],
        cli=("--redis-url",),
        metavar="URL",
    ),
    Setting(
        name="redis_username",
        default="",
        help="Redis ACL user, if redis_url names none.",
        parse=string,
        env="JOBMASTER_REDIS_USERNAME",
    ),
    Setting(
        name="redis_password",
        default="",
        help="Redis password, if redis_url has none (no URL-escaping needed). Never shown.",
        parse=secret,
        env="JOBMASTER_REDIS_PASSWORD",
        default_doc="none",
    ),
    Setting(
        name="redis_ssl_ca_certs",
        default="",
        help="TLS (rediss://): CA file that signed the server's certificate (default: the "
        "system's CAs).",
        parse=path,
        env="JOBMASTER_REDIS_SSL_CA_CERTS",
    ),
    Setting(
        name="redis_ssl_certfile",
        default="",
        help="TLS: client certificate file, for servers that require one.",
        parse=path,
        env="JOBMASTER_REDIS_SSL_CERTFILE",
    ),
    Setting(
        name="redis_ssl_keyfile",
        default="",
        help="TLS: private key of the client certificate (if not in the certificate file).",
        parse=path,
        env="JOBMASTER_REDIS_SSL_KEYFILE",
    ),
    Setting(
        name="redis_ssl_cert_reqs",
        default="required",
        help="TLS: check of the server's certificate: required, optional or none.",
        parse=choice("required", "optional", "none"),
        env="JOBMASTER_REDIS_SSL_CERT_REQS",
    ),
    Setting(
        name="redis_sentinels",
        default=[],
        help='Redis Sentinel addresses, as "host:port": the primary is asked of them '
        "(redis_url then gives only the scheme, user, password and database).",
        parse=sentinels,
        env="JOBMASTER_REDIS_SENTINELS",
        multiple=True,
    ),
    Setting(
        name="redis_sentinel_master",
        default="mymaster",
        help="Name of the primary the sentinels monitor.",
        parse=sentinel_master,
        env="JOBMASTER_REDIS_SENTINEL_MASTER",
    ),
    Setting(
        name="redis_sentinel_password",
        default="",
        help="Password of the sentinels themselves, if they have one. Never shown.",
        parse=secret,
        env="JOBMASTER_REDIS_SENTINEL_PASSWORD",
        default_doc="none",
    ),
    Setting(
        name="processes",
        default=None,
        help="Number of worker children the master forks.",
        parse=processes,
        env="JOBMASTER_PROCESSES",
        cli=("-p", "--processes"),
        default_doc="usable CPUs",
        metavar="INTEGER|auto",
        bounds="x>=1",
    ),
    Setting(
        name="concurrency",
        default=5,
        help="Number of job threads in each child.",
        parse=integer(1),
        env="JOBMASTER_CONCURRENCY",
        cli=("-t", "--concurrency"),
        metavar="INTEGER RANGE",
        bounds="x>=1",
    ),
    Setting(
        name="async_concurrency",
        default=100,
        help="async def jobs each child runs at once on its event loop, beside its threads.",
        parse=integer(1),
        env="JOBMASTER_ASYNC_CONCURRENCY",
        cli=("--async-concurrency",),
        metavar="INTEGER RANGE",
        bounds="x>=1",
    ),
    Setting(
        name="async_loop",
        default="auto",
        help="The children's event loop: auto (uvloop when installed), uvloop or asyncio.",
        parse=loop_kind,
        env="JOBMASTER_ASYNC_LOOP",
        metavar="[auto|uvloop|asyncio]",
    ),
    Setting(
        name="loop_lag_warning",
        default=0.5,
        help="Seconds an async job may block its child's event loop before it is logged.",
        parse=number(0, exclusive=True),
        bounds="x>0",
    ),
    Setting(
        name="queues",
        default=["default"],
        help='Queues to fetch from, as "name" or "name:weight".',
        parse=queues,
        env="JOBMASTER_QUEUES",
        cli=("-q", "--queue"),
        multiple=True,
        metavar="NAME[:WEIGHT]",
    ),
    Setting(
        name="strict",
        default=False,
        help="Drain queues strictly in the listed order instead of by weight.",
        parse=boolean,
    ),
    Setting(
        name="shutdown_timeout",
        default=25.0,
        help="Seconds running jobs get to finish on stop before they are pushed back.",
        parse=number(0),
        env="JOBMASTER_SHUTDOWN_TIMEOUT",
        cli=("--shutdown-timeout",),
        metavar="FLOAT RANGE",
        bounds="x>=0",
    ),
    Setting(
        name="preload",
        default=True,
        help="Import the app in the master so that children share its memory.",
        parse=boolean,
    ),
    Setting(
        name="max_child_mb",
        default=0,
        help='Memory limit per child in MB (0 = off, "auto" = from the container limit).',
        parse=max_child_mb,
        env="JOBMASTER_MAX_CHILD_MB",
        cli=("--max-child-mb",),
        metavar="INTEGER|auto",
        bounds="x>=0",
    ),
    Setting(
        name="max_jobs_per_child",
        default=0,
        help="Recycle a child after about this many jobs (0 = off, +-10 % jitter).",
        parse=integer(0),
    ),
    Setting(
        name="memory_metric",
        default="uss",
        help="How child memory is measured: uss, pss or rss.",
        parse=choice("uss", "pss", "rss"),
    ),
    Setting(
        name="memory_check_interval",
        default=5.0,
        help="Seconds between two measurements of the children's memory (faster near a limit).",
        parse=number(0, exclusive=True),
    ),
    Setting(
        name="memory_grace",
        default=30.0,
        help="Seconds a child over the memory limit gets to finish its jobs.",
        parse=number(0),
    ),
    Setting(
        name="track_status",
        default=True,
        help="Keep each job's status and attempts history in Redis (jobmaster.status).",
        parse=boolean,
    ),
    Setting(
        name="status_ttl",
        default=86400.0,
        help=(
            "Seconds a job's status and attempts history are kept after it ended"
            " (while it waits or runs, its status lives on)."
        ),
        parse=number(1),
    ),
    Setting(
        name="timeout_grace",
        default=30.0,
        help="Seconds after a job's timeout before a child stuck in it is recycled.",
        parse=number(0),
    ),
    Setting(
        name="cgroup_root",
        default="/sys/fs/cgroup",
        help="Where the cgroup filesystems are mounted; the memory limit is our own cgroup's.",
        parse=path,
        env="JOBMASTER_CGROUP_ROOT",
    ),
    Setting(
        name="max_crashes",
        default=3,
        help="Child deaths a job may cause before it goes to the dead set.",
        parse=integer(1),
    ),
    Setting(
        name="crash_queue",
        default="",
        help="If set, jobs that crash children too often go to this queue, not the dead set.",
        parse=crash_queue,
    ),
    Setting(
        name="heartbeat_ttl",
        default=60.0,
        help="Seconds a silent host may last before another master recovers its jobs.",
        parse=number(2),
    ),
    Setting(
        name="namespace",
        default="jobmaster",
        help="Prefix of every Redis key, so that several apps can share one Redis.",
        parse=namespace,
    ),
    Setting(
        name="data_dir",
        default=".jobmaster",
        help="Folder of the embedded Redis's data and socket, relative to the config file.",
        parse=path,
    ),
    Setting(
        name="log_level",
        default="info",
        help="Log level: debug, info, warning, error or critical.",
        parse=choice(*LOG_LEVELS),
        cli=("--log-level",),
        metavar="[debug|info|warning|error|critical]",
    ),
    Setting(
        name="log_levels",
        default={},
        help='Levels of single loggers over log_level, as a [log_levels] table of "logger" = '
        '"level" (env: "logger=level,...").',
        parse=logger_levels,
        env="JOBMASTER_LOG_LEVELS",
    ),
    Setting(
        name="log_format",
        default="text",
        help="Log format: text or json.",
        parse=choice("text", "json"),
        env="JOBMASTER_LOG_FORMAT",
        cli=("--log-format",),
        metavar="[text|json]",
    ),
    Setting(
        name="dead_max_jobs",
        default=10000,
        help="The dead set keeps at most this many jobs.",
        parse=integer(1),
    ),
    Setting(
        name="dead_max_days",
        default=180.0,
        help="Jobs older than this many days leave the dead set.",
        parse=number(0, exclusive=True),
    ),
    Setting(
        name="poll_interval",
        default=1.0,
        help="Seconds between polls of the scheduled and retry sets.",
        parse=number(0, exclusive=True),
    ),
    Setting(
        name="secret_key",
        default=[],
        help="Secret(s) that encrypt the arguments of `encrypt=True` jobs: the first "
        "encrypts, all decrypt (a list, or comma-separated). Never shown.",
        parse=secret_keys,
        env="JOBMASTER_SECRET_KEY",
        default_doc="none",
    ),
    Setting(
        name="metrics_port",
        default=0,
        help="Port on which the master serves Prometheus metrics at /metrics (0 = off).",
        parse=port,
        env="JOBMASTER_METRICS_PORT",
    ),
    Setting(
        name="metrics_host",
        default="127.0.0.1",
        help='Address the metrics port listens on ("0.0.0.0" or "::" for every interface).',
        parse=host,
        env="JOBMASTER_METRICS_HOST",
    ),
    Setting(
        name="web_password",
        default="",
        help="Password of the web dashboard (`jobmaster web`): required to listen on "
        "anything but loopback; at least 12 characters. Never shown.",
        parse=web_password,
        env="JOBMASTER_WEB_PASSWORD",
        default_doc="none",
    ),
    Setting(
        name="web_token",
        default="",
        help="Token for scripts reaching the web dashboard (`Authorization: Bearer TOKEN`); "
        'it also opens the login page. "auto": a random one, printed at start in a link '
        "that logs in (for hosts with other users); else at least 16 characters. "
        "Never shown otherwise.",
        parse=web_token,
        env="JOBMASTER_WEB_TOKEN",
        default_doc="none",
    ),
    Setting(
        name="web_hosts",
        default=[],
        help="Host names the web dashboard answers for, besides the address it listens on "
        'and localhost (any other Host header: 400, against DNS rebinding); "*.example.com" '
        'for a domain, "*" for any (when a proxy in front checks it).',
        parse=host_names,
        env="JOBMASTER_WEB_HOSTS",
    ),
    Setting(
        name="web_trusted_proxies",
        default=[],
        help='Addresses or networks ("127.0.0.1", "10.0.0.0/8") of the reverse proxies '
        "in front of the web dashboard: only a request from one of them may say, in "
        "X-Forwarded-For and X-Forwarded-Proto, who the client is and whether it came over "
        "HTTPS. None by default: a local user could otherwise claim any address and "
        "escape the login throttle.",
        parse=proxy_addresses,
        env="JOBMASTER_WEB_TRUSTED_PROXIES",
    ),
    Setting(
        name="web_cookie_secure",
        default="auto",
        help='Mark the dashboard\'s session cookie Secure (HTTPS only): "auto" does when '
        "the request came over HTTPS (TLS, or a trusted proxy's X-Forwarded-Proto).",
        parse=cookie_secure,
        env="JOBMASTER_WEB_COOKIE_SECURE",
    ),
]

SETTINGS: dict[str, Setting] = {setting.name: setting for setting in _ALL}


# --- documentation ---------------------------------------------------------------


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return str(value)


def _row(setting: Setting) -> str:
    default = setting.default_doc or f"`{_toml(setting.default)}`"
    env = ", ".join(f"`{name}`" for name in setting.env_vars)
    cli = ", ".join(f"`{flag}`" for flag in setting.cli)
    if cli and setting.multiple:
        cli += " (repeatable)"
    cells = [f"`{setting.name}`", default, env, cli, setting.help]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def reference_markdown() -> str:
    """The settings reference table docs/configuration.md embeds between its markers."""
    lines = ["| key | default | env | CLI flag | meaning |", "| --- | --- | --- | --- | --- |"]
    lines += [_row(setting) for setting in SETTINGS.values()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
