"""Django's Tasks framework on jobmaster (``pip install 'jobmaster[django]'``).

In settings::

    TASKS = {"default": {"BACKEND": "jobmaster.contrib.django.JobmasterBackend",
                         "OPTIONS": {"CONFIG": BASE_DIR / "jobmaster.toml"}}}

The worker: ``app = ["jobmaster.contrib.django"]`` in jobmaster.toml, and
``DJANGO_SETTINGS_MODULE`` in its environment. Imported by the worker (so
in the master, before any fork), this module sets Django up, imports each
installed app's ``tasks`` module (registering its tasks), wraps every job in
``close_old_connections()`` and has each child let go of the master's
database connections after fork (worker.py). Imported by a Django process
that is set up, or setting up, it does none of the setup.

docs/integrations.md has the whole story: the backend (backend.py), what a
``TaskResult`` holds and where (records.py), priorities, retries, on_commit.
"""

from __future__ import annotations

import jobmaster
from jobmaster import middleware as _middleware
from jobmaster.contrib.django.backend import (
    DuplicateTask,
    JobmasterBackend,
    JobmasterTask,
    jobmaster_options,
)
from jobmaster.contrib.django.worker import Connections, forget_inherited_connections, setup

__all__ = [
    "Connections",
    "DuplicateTask",
    "JobmasterBackend",
    "JobmasterTask",
    "jobmaster_options",
]

if not any(isinstance(m, Connections) for m in _middleware.installed()):
    _middleware.add(Connections())
jobmaster.on_child_start(forget_inherited_connections)
setup()
