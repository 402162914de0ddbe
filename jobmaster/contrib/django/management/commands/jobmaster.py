"""``python manage.py jobmaster [ARGS...]``: the ``jobmaster`` command for this project.

The same as ``DJANGO_SETTINGS_MODULE=<this project's> jobmaster ARGS...``:
``python manage.py jobmaster -c jobmaster.toml`` starts the worker,
``python manage.py jobmaster check -c jobmaster.toml`` checks it, and every
other subcommand works too. The config lists ``app =
["jobmaster.contrib.django"]`` (and the project's other job modules).

It replaces this process with the ``jobmaster`` command rather than run the
worker in it: Django is set up here already, and the worker's master must
set Django up itself, import each app's tasks and then fork, with nothing
of this process (its database connections) carried into the children.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no types
    help = "Run the jobmaster command (the worker, check, stats...) for this project."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("jobmaster_args", nargs=argparse.REMAINDER)

    def run_from_argv(self, argv: list[str]) -> None:
        # Every argument is jobmaster's (``-c FILE`` first included, which
        # Django's parser would refuse); manage.py already read --settings.
        self.handle(jobmaster_args=argv[2:])

    def handle(self, *args: Any, **options: Any) -> None:
        command = _jobmaster_command()
        environment = {**os.environ, "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE}
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(command, [command, *options["jobmaster_args"]], environment)  # noqa: S606


def _jobmaster_command() -> str:
    """The ``jobmaster`` script beside this Python (its venv), else on PATH."""
    beside = Path(sys.executable).parent / "jobmaster"
    if beside.exists():
        return str(beside)
    found = shutil.which("jobmaster")
    if found is None:
        raise CommandError("no jobmaster command found: pip install 'jobmaster[django]'")
    return found
