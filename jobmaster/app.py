"""Importing the user's app modules, which registers their jobs.

Where the modules are looked for: the config's ``pythonpath`` folders, the
current folder and the config file's folder, so that ``jobmaster -c
deploy/jobmaster.toml`` finds ``app = ["myapp.jobs"]`` whether it is run
from the project, from ``deploy/`` or by a service manager from ``/``.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import sys
import traceback
from dataclasses import dataclass

from jobmaster import registry
from jobmaster.config import Config
from jobmaster.errors import ConfigError, JobmasterError
from jobmaster.middleware import base as middleware

log = logging.getLogger("jobmaster.app")


class AppImportError(JobmasterError):
    """An app module failed to import: nothing can run, so we halt instead of looping."""


def search_path(config: Config) -> list[str]:
    """The folders app modules are imported from, first first."""
    folders = [*config.pythonpath, os.getcwd()]
    if config.source is not None:
        folders.append(os.path.dirname(config.source))
    return list(dict.fromkeys(folders))


def use_folders(folders: list[str]) -> None:
    """Put ``folders`` at the front of ``sys.path``, in order (those there already stay)."""
    for folder in reversed(folders):
        if folder not in sys.path:
            sys.path.insert(0, folder)


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
            raise AppImportError(
                f"cannot import app module {module!r}: {type(error).__name__}: {error}"
                f"{_where(module, error)}"
            ) from error
    return registry.names()


def _where(module: str, error: Exception) -> str:
    """Where the import failed; for the app module itself not found, where it was
    looked for (importlib's own frame would say nothing)."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if missing is not None and (module == missing or module.startswith(f"{missing}.")):
        return (
            " (looked in the config's pythonpath, the current folder and the config file's folder)"
        )
    last = traceback.extract_tb(error.__traceback__)[-1:]
    return f" ({last[0].filename}:{last[0].lineno})" if last else ""


def load_app(config: Config) -> list[str]:
    """Import the app modules, then install the config's middleware."""
    use_folders(search_path(config))
    names = import_app(config.app)
    middleware.load(config.middleware, source=config.source or "config")
    return names


def check_periodic(config: Config) -> None:
    """Every ``[periodic.NAME]`` entry names a job the app registered (after
    ``load_app``): a typo would otherwise be enqueued on every tick and buried
    as unknown by the workers, with ``check`` saying ok."""
    known = registry.names()
    for name, entry in config.periodic.items():
        if entry.job not in known:
            close = difflib.get_close_matches(entry.job, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            shown = name if name.isprintable() else repr(name)
            raise ConfigError(
                f"{config.source or 'config'}: [periodic.{shown}] job {entry.job!r} is not "
                f"registered by the app ({', '.join(config.app) or 'no app'}){hint}"
            )


@dataclass(frozen=True)
class JobCheck:
    """For a producer: whether the workers of this config register ``job``.

    ``registered`` is None when this process cannot know: the config names no
    app, or the app does not import here (producers may lack its
    dependencies, or enqueue for another app's workers). ``why`` is one line
    for the user either way (empty when it is registered).
    """

    registered: bool | None
    why: str = ""


def check_job(config: Config, job: str) -> JobCheck:
    """Does the config's app register ``job``? A typo enqueues a job no worker
    runs, which goes straight to the dead set."""
    if not config.app:
        return JobCheck(
            None, f"not checked that a worker registers {job!r}: the config names no app"
        )
    try:
        use_folders(search_path(config))
        known = import_app(config.app)
    except AppImportError as error:
        first = str(error).splitlines()[0]
        return JobCheck(None, f"not checked that a worker registers {job!r}: {first}")
    if job in known:
        return JobCheck(True)
    close = difflib.get_close_matches(job, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return JobCheck(
        False,
        f"no job {job!r} is registered by the app ({', '.join(config.app)}){hint}: "
        "its workers would not run it",
    )
