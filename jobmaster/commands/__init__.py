"""The operator's commands: stats, ps, ctl, dead|retries|scheduled, queue, batches,
cancel, web.

Built on jobmaster.api only. Their modules use cli.py's helpers
(``config_options``, ``reports_errors``, ``load``), and cli.py adds them to
the ``jobmaster`` group by calling ``register`` once those helpers exist. So
that the cycle resolves whichever side is imported first, ``register``
imports the modules only when called, and this package makes sure cli.py is
loaded (it calls ``register``) before any of its modules runs.
"""

from __future__ import annotations

import click


def register(main: click.Group) -> None:
    from jobmaster.commands.batches import batches_group
    from jobmaster.commands.cancel import cancel_command
    from jobmaster.commands.processes import ctl_group, ps_command
    from jobmaster.commands.sets import GROUPS
    from jobmaster.commands.stats import queue_group, stats_command
    from jobmaster.commands.web import web_command

    for command in (
        stats_command,
        ps_command,
        ctl_group,
        *GROUPS,
        queue_group,
        batches_group,
        cancel_command,
        web_command,
    ):
        main.add_command(command)


import jobmaster.cli  # noqa: E402, F401 - after register: cli.py calls it
