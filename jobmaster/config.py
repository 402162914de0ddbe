"""Load the configuration: defaults, then the TOML file, then env, then CLI.

Every mistake is a ``ConfigError`` of one line that says where the bad value
came from (file and key, environment variable or option), so that it is
caught before anything is forked and fixed without reading a traceback.
What the settings are and how each is parsed lives in ``jobmaster.settings``.
"""

from __future__ import annotations

import copy
import difflib
import os
import sys
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from croniter import croniter

from jobmaster.cpus import usable_cpus
from jobmaster.environment import env_value
from jobmaster.errors import ConfigError
from jobmaster.payload import check_json
from jobmaster.redis_checks import checked_settings
from jobmaster.redis_target import RedisTarget, mask_url
from jobmaster.settings import SETTINGS, Parser, boolean, number, queue_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["Config", "PeriodicEntry", "load_config", "mask_url"]


def _default(name: str) -> Callable[[], Any]:
    # Defaults come from SETTINGS, copied so that no two configs share a list.
    return lambda: copy.deepcopy(SETTINGS[name].default)


@dataclass(frozen=True)
class PeriodicEntry:
    """One ``[periodic.NAME]`` table: a job enqueued on a cron or every N seconds."""

    name: str
    job: str
    cron: str | None = None
    every: float | None = None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    enabled: bool = True
    catch_up: bool = False  # enqueue the slots missed while no master ran
    unique: bool = False  # skip a slot while the previous run is still queued or running
    timezone: str = "UTC"  # IANA name the cron expression is read in


@dataclass
class Config:
    """The settings in force, one attribute per entry of ``SETTINGS``."""

    app: list[str] = field(default_factory=_default("app"))
    pythonpath: list[str] = field(default_factory=_default("pythonpath"))  # absolute
    middleware: list[str] = field(default_factory=_default("middleware"))
    # Not in the repr: it may hold a password (``redis_url_masked`` shows it safely).
    redis_url: str = field(default_factory=_default("redis_url"), repr=False)
    redis_username: str = field(default_factory=_default("redis_username"))
    redis_password: str = field(default_factory=_default("redis_password"), repr=False)
    redis_ssl_ca_certs: str = field(default_factory=_default("redis_ssl_ca_certs"))
    redis_ssl_certfile: str = field(default_factory=_default("redis_ssl_certfile"))
    redis_ssl_keyfile: str = field(default_factory=_default("redis_ssl_keyfile"))
    redis_ssl_cert_reqs: str = field(default_factory=_default("redis_ssl_cert_reqs"))
    redis_sentinels: list[str] = field(default_factory=_default("redis_sentinels"))
    redis_sentinel_master: str = field(default_factory=_default("redis_sentinel_master"))
    redis_sentinel_password: str = field(
        default_factory=_default("redis_sentinel_password"), repr=False
    )
    processes: int = field(default_factory=usable_cpus)
    concurrency: int = field(default_factory=_default("concurrency"))
    async_concurrency: int = field(default_factory=_default("async_concurrency"))
    async_loop: str = field(default_factory=_default("async_loop"))
    loop_lag_warning: float = field(default_factory=_default("loop_lag_warning"))
    queues: list[str] = field(default_factory=_default("queues"))
    strict: bool = field(default_factory=_default("strict"))
    shutdown_timeout: float = field(default_factory=_default("shutdown_timeout"))
    preload: bool = field(default_factory=_default("preload"))
    max_child_mb: int | str = field(default_factory=_default("max_child_mb"))  # an int, or "auto"
    max_jobs_per_child: int = field(default_factory=_default("max_jobs_per_child"))
    memory_metric: str = field(default_factory=_default("memory_metric"))
    memory_check_interval: float = field(default_factory=_default("memory_check_interval"))
    memory_grace: float = field(default_factory=_default("memory_grace"))
    track_status: bool = field(default_factory=_default("track_status"))
    status_ttl: float = field(default_factory=_default("status_ttl"))
    timeout_grace: float = field(default_factory=_default("timeout_grace"))
    cgroup_root: str = field(default_factory=_default("cgroup_root"))
    max_crashes: int = field(default_factory=_default("max_crashes"))
    crash_queue: str = field(default_factory=_default("crash_queue"))
    heartbeat_ttl: float = field(default_factory=_default("heartbeat_ttl"))
    namespace: str = field(default_factory=_default("namespace"))
    data_dir: str = field(default_factory=_default("data_dir"))
    log_level: str = field(default_factory=_default("log_level"))
    log_levels: dict[str, str] = field(default_factory=_default("log_levels"))
    log_format: str = field(default_factory=_default("log_format"))
    dead_max_jobs: int = field(default_factory=_default("dead_max_jobs"))
    dead_max_days: float = field(default_factory=_default("dead_max_days"))
    poll_interval: float = field(default_factory=_default("poll_interval"))
    metrics_port: int = field(default_factory=_default("metrics_port"))
    metrics_host: str = field(default_factory=_default("metrics_host"))
    # Never in the repr: a logged or printed Config must not leak the keys.
    secret_key: list[str] = field(default_factory=_default("secret_key"), repr=False)
    web_password: str = field(default_factory=_default("web_password"), repr=False)
    web_token: str = field(default_factory=_default("web_token"), repr=False)
    web_hosts: list[str] = field(default_factory=_default("web_hosts"))
    web_cookie_secure: str = field(default_factory=_default("web_cookie_secure"))
    web_trusted_proxies: list[str] = field(default_factory=_default("web_trusted_proxies"))
    source: str | None = None
    periodic: dict[str, PeriodicEntry] = field(default_factory=dict)

    @property
    def queue_weights(self) -> list[tuple[str, int]]:
        """``["critical:3", "low"]`` as ``[("critical", 3), ("low", 1)]``."""
        pairs = []
        for entry in self.queues:
            name, _, weight = entry.partition(":")
            pairs.append((name, int(weight) if weight else 1))
        return pairs

    @property
    def queue_names(self) -> list[str]:
        return [name for name, _ in self.queue_weights]

    @property
    def redis_url_masked(self) -> str:
        """The Redis URL safe to log or print (with Sentinel: the master and sentinels)."""
        return RedisTarget.of(self).shown()


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Read the config with precedence CLI ``overrides`` > ``env`` > file > defaults.

    ``overrides`` are CLI values by setting name, strings or already parsed;
    ``None`` and empty lists (click's default for a repeatable option) mean
    "not given". Raises ``ConfigError`` with one readable line.
    """
    values = {name: copy.deepcopy(setting.default) for name, setting in SETTINGS.items()}
    periodic: dict[str, PeriodicEntry] = {}
    source = None
    base = os.getcwd()
    if path is not None:
        label = os.fspath(path)
        data = _read_toml(label)
        values.update(_file_values(data, label))
        periodic = _periodic(data.get("periodic", {}), label)
        source = os.path.abspath(label)
        base = os.path.dirname(source)
    environment = os.environ if env is None else env
    values.update(_env_values(environment))
    values.update(_cli_values(overrides or {}))
    values.update(
        checked_settings(  # TLS files and Redis settings that only make sense together
            values,
            base=base,
            file_label=os.fspath(path) if path is not None else None,
            env=environment,
            overrides=overrides or {},
        )
    )
    if values["processes"] is None:
        values["processes"] = usable_cpus()
    # Producers and workers started from different folders with the same
    # config file must find the same embedded Redis socket.
    values["data_dir"] = os.path.abspath(os.path.join(base, os.path.expanduser(values["data_dir"])))
    # Likewise the app's folders: `jobmaster -c deploy/jobmaster.toml` works from anywhere.
    values["pythonpath"] = [
        os.path.abspath(os.path.join(base, os.path.expanduser(item)))
        for item in values["pythonpath"]
    ]
    return Config(**values, source=source, periodic=periodic)


def _read_toml(label: str) -> dict[str, Any]:
    try:
        with open(label, "rb") as file:
            data: dict[str, Any] = tomllib.load(file)
            return data
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read: {exc.strerror or exc}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        # ValueError, not only TOMLDecodeError (its subclass): tomllib lets
        # int()'s own error escape for an integer of more than 4300 digits.
        raise ConfigError(f"{label}: not valid TOML: {exc}") from exc
    except RecursionError:  # tomllib recurses once per level of nested arrays or tables
        raise ConfigError(f"{label}: not valid TOML: arrays or tables nested too deeply") from None


def _suggest(key: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _file_values(data: Mapping[str, Any], label: str) -> dict[str, Any]:
    values = {}
    for key, raw in data.items():
        if key == "periodic":
            continue
        if key not in SETTINGS:
            hint = _suggest(key, [*SETTINGS, "periodic"])
            raise ConfigError(f"{label}: unknown key {key!r}{hint}")
        try:
            values[key] = SETTINGS[key].parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{label}: {key!r} {exc}") from None
    return values


def _env_values(env: Mapping[str, str]) -> dict[str, Any]:
    values = {}
    for name, setting in SETTINGS.items():
        found = env_value(setting.env_vars, env)  # JOBMASTER_REDIS_URL over REDIS_URL
        if found is None:
            continue
        var, raw = found
        try:
            values[name] = setting.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"environment {var}: {exc}") from None
    return values


def _cli_values(overrides: Mapping[str, Any]) -> dict[str, Any]:
    values = {}
    for name, raw in overrides.items():
        if name not in SETTINGS:
            raise ConfigError(f"unknown setting {name!r}{_suggest(name, SETTINGS)}")
        if raw is None or (isinstance(raw, list | tuple) and not raw):
            continue
        setting = SETTINGS[name]
        try:
            values[name] = setting.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"option {setting.option or name}: {exc}") from None
    return values


# --- [periodic.NAME] -------------------------------------------------------------

_PERIODIC_KEYS = (
    "job",
    "cron",
    "every",
    "args",
    "kwargs",
    "queue",
    "enabled",
    "catch_up",
    "timezone",
    "unique",
)


def _periodic(tables: object, label: str) -> dict[str, PeriodicEntry]:
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise ConfigError(f"{label}: 'periodic' must hold [periodic.NAME] tables")
    entries = {}
    for name, table in tables.items():
        try:
            entries[name] = _periodic_entry(name, table)
        except ValueError as exc:
            # A quoted TOML table name may hold a newline: repr keeps the error one line.
            shown = name if name.isprintable() else repr(name)
            raise ConfigError(f"{label}: [periodic.{shown}] {exc}") from None
    return entries


def _periodic_entry(name: str, table: Mapping[str, Any]) -> PeriodicEntry:
    for key in table:
        if key not in _PERIODIC_KEYS:
            raise ValueError(f"unknown key {key!r}{_suggest(key, _PERIODIC_KEYS)}")
    if "job" not in table:
        raise ValueError("'job' is required")
    job = table["job"]
    if not isinstance(job, str) or not job:
        raise ValueError(f"'job' must be the name of a job, got {job!r}")
    if ("cron" in table) == ("every" in table):
        raise ValueError("needs exactly one of 'cron' and 'every'")
    cron = table.get("cron")
    if cron is not None and not _valid_cron(cron):
        raise ValueError(f"'cron' must be a cron expression of 5 or 6 fields, got {cron!r}")
    if "timezone" in table and cron is None:
        raise ValueError("'timezone' applies to 'cron' only ('every' slots follow the unix epoch)")
    args = _field(table, "args", _json_of(list, "a list"), [])
    kwargs = _field(table, "kwargs", _json_of(dict, "a table"), {})
    return PeriodicEntry(
        name=name,
        job=job,
        cron=cron,
        every=_field(table, "every", number(0, exclusive=True), None),
        args=args,
        kwargs=kwargs,
        queue=_field(table, "queue", _periodic_queue, "default"),
        enabled=_field(table, "enabled", boolean, True),
        catch_up=_field(table, "catch_up", boolean, False),
        unique=_field(table, "unique", _periodic_unique, False),
        timezone=_field(table, "timezone", _timezone, "UTC"),
    )


def _periodic_unique(value: object) -> bool:
    """``unique = "until_executed"`` (or true): one run at a time."""
    if value is True or value == "until_executed":
        return True
    if value is False:
        return False
    raise ValueError(f'must be "until_executed" or false, got {value!r}')


def _field(table: Mapping[str, Any], key: str, parse: Parser, default: Any) -> Any:
    if key not in table:
        return default
    try:
        return parse(table[key])
    except ValueError as exc:
        raise ValueError(f"{key!r} {exc}") from None


def _json_of(kind: type, what: str) -> Parser:
    # TOML has dates and times, which a payload cannot carry: refuse them here
    # rather than at the first tick, in the master's loop.
    def parse(value: object) -> object:
        if not isinstance(value, kind):
            raise ValueError(f"must be {what}, got {value!r}")
        try:
            check_json(value, "value")
        except TypeError as exc:
            raise ValueError(f"must hold JSON values only: {exc}") from None
        return value

    return parse


def _timezone(value: object) -> str:
    if isinstance(value, str) and value:
        try:
            zoneinfo.ZoneInfo(value)
            return value
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # OSError: "Europe"
            pass
    raise ValueError(f"must be an IANA time zone name such as 'Europe/Paris', got {value!r}")


def _periodic_queue(value: object) -> str:
    try:
        if isinstance(value, str):
            return queue_name(value)
    except ValueError:
        pass
    raise ValueError(f"must be a queue name, got {value!r}")


def _valid_cron(expression: object) -> bool:
    # croniter also takes 7 fields (years) and @aliases; the scheduler is only
    # promised 5 fields, or 6 with seconds.
    return (
        isinstance(expression, str)
        and len(expression.split()) in (5, 6)
        and bool(croniter.is_valid(expression))
    )
