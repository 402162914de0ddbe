"""The operator's commands: stats, ps, ctl, dead|retries|scheduled, queue, batches,
cancel, web.

Built on jobmaster.api only. They share options.py (``-c FILE``,
``--redis-url``, ``--debug``, the one-line error report) with cli.py, which
adds them to the ``jobmaster`` group with ``register``. The dependency runs
one way: cli.py imports this package, nothing here imports cli.py.
"""

from __future__ import annotations

import click

from jobmaster.commands.batches import batches_group
from jobmaster.commands.cancel import cancel_command
from jobmaster.commands.processes import ctl_group, ps_command
from jobmaster.commands.sets import GROUPS
from jobmaster.commands.stats import queue_group, stats_command
from jobmaster.commands.web import web_command

COMMANDS: tuple[click.Command, ...] = (
    stats_command,
    ps_command,
    ctl_group,
    *GROUPS,
    queue_group,
    batches_group,
    cancel_command,
    web_command,
)


def register(main: click.Group) -> None:
    for command in COMMANDS:
        main.add_command(command)
