"""``jobmaster cancel JID``: what ``jobmaster.cancel(jid)`` does, from a shell.

Exit 0 when the job will not run (on): removed from where it waited, or, for
a running job, stopped by its worker (confirmed within ``--wait``; with
``--wait 0``, told to stop); exit 7 (refused) when it had already ended or
ended on its own first, 1 when its worker did not confirm the stop in time
(the request stays), 6 (not found) when it is unknown: a script can tell
"cancelled" from "too late" from "no such job" without parsing the line
(exitcodes.py).
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
    """Cancel a job: a waiting one is removed at once, a running one is stopped by its
    worker (JobCancelled in its thread), confirmed within --wait. Exit 7 if it already
    ended or ended first, 1 if the stop was not confirmed in time, 6 if unknown."""
    with target(config_file, redis_url) as t:
        result = Canceller(t.client).cancel(jid, wait)
    if as_json:
        echo_json(result.as_dict())
    elif result.cancelled:
        echo(result.describe())
    else:  # as every command's failure reads (cli.reports_errors)
        echo(f"jobmaster: {result.describe()}", err=True)
    if result.pending:  # asked, not confirmed in time: it may still stop (or end)
        sys.exit(exitcodes.RUNTIME_FAILURE)
    if not result.cancelled:
        sys.exit(exitcodes.REFUSED if result.status else exitcodes.NOT_FOUND)
