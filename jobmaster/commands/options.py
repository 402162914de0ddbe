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
from jobmaster.errors import ConfigError, JobmasterError, NotFound, Refused
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
            echo(f"jobmaster: {error}", err=True)
            sys.exit(exit_code(error))

    return wrapper  # type: ignore[return-value]


def exit_code(error: Exception) -> int:
    """The exitcodes.py code of an error a command reports."""
    codes = {
        ConfigError: exitcodes.USAGE,
        AppImportError: exitcodes.APP_LOAD_FAILED,
        NotFound: exitcodes.NOT_FOUND,
        Refused: exitcodes.REFUSED,
    }
    return next(
        (code for kind, code in codes.items() if isinstance(error, kind)),
        exitcodes.RUNTIME_FAILURE,
    )


# The options every command takes (config_options): where they are written
# before a command's name, the group hands them on to that command.
SHARED_WITH_VALUE = ("-c", "--config", "--redis-url")
SHARED_FLAGS = ("--debug",)


def split_shared(args: list[str]) -> tuple[list[str], list[str]]:
    """The shared options at the head of ``args`` (``-c FILE``, ``--config=FILE``,
    ``-cFILE``, ``--redis-url URL``, ``--debug``), and what follows them."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in SHARED_WITH_VALUE and index + 1 < len(args):
            index += 2
        elif (
            arg in SHARED_FLAGS
            or arg.startswith(("--config=", "--redis-url="))
            or (arg.startswith("-c") and not arg.startswith("--") and len(arg) > 2)
        ):
            index += 1
        else:
            break
    return args[:index], args[index:]


class SharedOptionsGroup(click.Group):
    """A command group that takes ``-c FILE`` and ``--redis-url`` before the
    command's name too: ``jobmaster dead -c X list`` is ``jobmaster dead list
    -c X``. One rule for every group, nested ones included (``jobmaster -c X dead
    list`` goes down one level at a time); the command itself owns the options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self.hand_on(args))

    def hand_on(self, args: list[str]) -> list[str]:
        shared, rest = split_shared(args)
        if shared and rest and rest[0] in self.commands:
            return [rest[0], *shared, *rest[1:]]
        return args

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The shared options first: every command of the group takes them, here
        or after its name."""
        rows = [
            ("-c, --config FILE", "The TOML config file (here or after the command)."),
            ("--redis-url URL", "Redis to use, overriding the config (here or after it)."),
        ]
        rows += [row for param in self.get_params(ctx) if (row := param.get_help_record(ctx))]
        with formatter.section("Options"):
            formatter.write_dl(rows)
        self.format_commands(ctx, formatter)


def load(config_file: str | None, overrides: dict[str, Any]) -> Config:
    return load_config(config_file, overrides)
