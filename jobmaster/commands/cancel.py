"""``jobmaster cancel JID``: what ``jobmaster.cancel(jid)`` does, from a shell.

Exit 0 when the job will not run (on): removed from where it waited, or, for
a running job, stopped by its worker (confirmed within ``--wait``); exit 1
when it had already ended, ended on its own first, did not stop in time or
is unknown, so a script can tell "cancelled" from "too late" without
parsing the line.
"""

from __future__ import annotations

import sys

import click

from jobmaster import exitcodes
from jobmaster.api import Canceller
from jobmaster.api.cancels import CONFIRM_WAIT
from jobmaster.commands.common import command_options, json_option, target
from jobmaster.commands.output import echo, echo_json


@click.command(name="cancel")
@click.argument("jid")
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=CONFIRM_WAIT,
    show_default=True,
    help="Seconds to wait for a running job's worker to confirm it stopped (0: don't wait).",
)
@json_option
@command_options
def cancel_command(
    jid: str,
    wait: float,
    as_json: bool,
    config_file: str | None,
    redis_url: str | None,
    debug: bool,
) -> None:
    """Cancel a job: a waiting one is removed at once, a running one stops at once
    (JobCancelled in its thread). Exit 1 if it already ended, ended first or is unknown."""
    with target(config_file, redis_url) as t:
        result = Canceller(t.client).cancel(jid, wait)
    if as_json:
        echo_json(result.as_dict())
    elif result.cancelled:
        echo(result.describe())
    else:  # as every command's failure reads (cli.reports_errors)
        echo(f"jobmaster: {result.describe()}", err=True)
    if not result.cancelled:
        sys.exit(exitcodes.RUNTIME_FAILURE)
