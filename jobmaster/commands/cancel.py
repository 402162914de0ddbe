"""``jobmaster cancel JID``: what ``jobmaster.cancel(jid)`` does, from a shell.

Exit 0 when the job will not run (on): removed from where it waited, or told
to stop where it runs; exit 7 (refused) when it had already ended, 6 (not
found) when it is unknown, so a script can tell "cancelled" from "too late"
from "no such job" without parsing the line (exitcodes.py).
"""

from __future__ import annotations

import sys

import click

from jobmaster import exitcodes
from jobmaster.api import Canceller
from jobmaster.commands.common import command_options, json_option, target
from jobmaster.commands.output import echo, echo_json


@click.command(name="cancel")
@click.argument("jid")
@json_option
@command_options
def cancel_command(
    jid: str, as_json: bool, config_file: str | None, redis_url: str | None, debug: bool
) -> None:
    """Cancel a job: a waiting one is removed at once, a running one stops within
    a second (JobCancelled in its thread). Exit 7 if it already ended, 6 if unknown."""
    with target(config_file, redis_url) as t:
        result = Canceller(t.client).cancel(jid)
    if as_json:
        echo_json(result.as_dict())
    elif result.cancelled:
        echo(result.describe())
    else:  # as every command's failure reads (cli.reports_errors)
        echo(f"jobmaster: {result.describe()}", err=True)
    if not result.cancelled:
        sys.exit(exitcodes.REFUSED if result.status else exitcodes.NOT_FOUND)
