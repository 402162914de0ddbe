"""Importing the user's app modules, which registers their jobs."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import traceback

from jobmaster import registry
from jobmaster.config import Config
from jobmaster.errors import JobmasterError
from jobmaster.middleware import base as middleware

log = logging.getLogger("jobmaster.app")


class AppImportError(JobmasterError):
    """An app module failed to import: nothing can run, so we halt instead of looping."""


def import_app(modules: list[str]) -> list[str]:
    """Import each module; returns the registered job names.

    The current directory goes on ``sys.path`` first, as ``python -m`` would
    do: a console script's path does not include it, and ``app = ["myapp.jobs"]``
    run from the project folder must just work.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:
            last = traceback.extract_tb(error.__traceback__)[-1:]
            where = f" ({last[0].filename}:{last[0].lineno})" if last else ""
            raise AppImportError(
                f"cannot import app module {module!r}: {type(error).__name__}: {error}{where}"
            ) from error
    return registry.names()


def load_app(config: Config) -> list[str]:
    """Import the app modules, then install the config's middleware."""
    names = import_app(config.app)
    middleware.load(config.middleware, source=config.source or "config")
    return names
