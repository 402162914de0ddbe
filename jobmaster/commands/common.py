"""What every operator command shares: options, the config, a Client, confirmation.

The config is resolved like every other command's (``-c FILE``,
``--redis-url``, CLI > env > file > defaults), so the commands read the
namespace and Redis the workers use. Everything they do goes through
jobmaster.api: no key name is spelled out here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import click
import redis

from jobmaster.client import Client
from jobmaster.commands.options import config_options, load, reports_errors
from jobmaster.commands.output import safe
from jobmaster.config import Config
from jobmaster.connection import describe_error
from jobmaster.deadset import DeadSetLimits
from jobmaster.errors import JobmasterError

F = TypeVar("F", bound=Callable[..., Any])


def command_options(func: F) -> F:
    """``-c FILE``, ``--redis-url``, ``--debug`` and the one-line error report."""
    return config_options(reports_errors(func))


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print the data as JSON.")(func)


def yes_option(func: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(func)


@dataclass(frozen=True)
class Target:
    """The config in force and a Client on its Redis and namespace."""

    config: Config
    client: Client

    @property
    def dead_limits(self) -> DeadSetLimits:
        return DeadSetLimits(self.config.dead_max_jobs, self.config.dead_max_days)


@contextlib.contextmanager
def target(config_file: str | None, redis_url: str | None) -> Iterator[Target]:
    """The config's Redis; an unreachable one is one line naming it (password masked).

    Connections are lazy, so the first command inside the block is what fails:
    the whole command body runs inside this block.
    """
    config = load(config_file, {"redis_url": redis_url})
    client = Client.from_config(config)  # URL, credentials, TLS or Sentinel
    try:
        yield Target(config, client)
    except (redis.ConnectionError, redis.TimeoutError) as error:
        raise JobmasterError(
            f"cannot reach Redis at {config.redis_url_masked}: {describe_error(error)}"
        ) from error


def confirm(question: str, yes: bool) -> None:
    """Ask before destroying jobs; ``--yes`` for scripts. No answer (EOF) aborts, exit 1."""
    if not yes:
        click.confirm(safe(question), abort=True)
