"""The options and the error report that every subcommand shares.

``jobmaster run`` (cli.py) and the operator's commands (this package) both
take ``-c FILE``, ``--redis-url`` and ``--debug`` and turn our errors into
one line and an exit code. They live here, below both, so that cli.py
imports the commands and no command imports cli.py: the import cycle that
needed an import at the bottom of each file is gone.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import redis

from jobmaster import exitcodes
from jobmaster.app import AppImportError
from jobmaster.commands.output import echo
from jobmaster.config import Config, load_config
from jobmaster.errors import ConfigError, JobmasterError
from jobmaster.proctitle import set_title
from jobmaster.redis_target import mask_url
from jobmaster.settings import SETTINGS

F = TypeVar("F", bound=Callable[..., Any])


def hide_url_password(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A password in ``--redis-url`` is in this process's command line, which
    every local user reads with ``ps``: mask it in the title at once (before
    connecting, which may take a while) and say where it belongs instead."""
    if value is None or mask_url(value) == value:
        return value
    masked = mask_url(value)
    if any(value in arg for arg in sys.argv):  # not when called in process (tests)
        set_title(" ".join(["jobmaster", *(a.replace(value, masked) for a in sys.argv[1:])]))
    echo(
        "jobmaster: warning: --redis-url holds a password, which other local users can "
        "read in `ps` until this process masks it; put it in the config file, "
        "JOBMASTER_REDIS_URL or JOBMASTER_REDIS_PASSWORD instead",
        err=True,
    )
    return value


def config_options(func: F) -> F:
    """``-c FILE``, ``--redis-url`` and ``--debug``, which every subcommand takes."""
    func = click.option("--debug", is_flag=True, help="Show tracebacks of errors.")(func)
    func = click.option(
        "--redis-url",
        "redis_url",
        default=None,
        metavar=SETTINGS["redis_url"].metavar,
        help=SETTINGS["redis_url"].help,
        callback=hide_url_password,
    )(func)
    func = click.option(
        "-c", "--config", "config_file", default=None, metavar="FILE", help="The TOML config file."
    )(func)
    return func


def reports_errors(func: F) -> F:
    """Turn our errors into one line and an exit code, before anything is forked."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = kwargs.get("debug", False)
        try:
            return func(*args, **kwargs)
        except (JobmasterError, redis.RedisError) as error:
            if debug:
                raise
            code = exitcodes.RUNTIME_FAILURE
            if isinstance(error, ConfigError):
                code = exitcodes.USAGE
            elif isinstance(error, AppImportError):
                code = exitcodes.APP_LOAD_FAILED
            echo(f"jobmaster: {error}", err=True)
            sys.exit(code)

    return wrapper  # type: ignore[return-value]


def load(config_file: str | None, overrides: dict[str, Any]) -> Config:
    return load_config(config_file, overrides)
