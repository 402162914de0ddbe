"""The worker's side of a Django project: setup, each task's run, database connections.

``app = ["jobmaster.contrib.django"]`` with ``DJANGO_SETTINGS_MODULE`` set:
the master calls ``django.setup()`` and imports each installed app's
``tasks`` module (``setup``), so their tasks are registered before any fork.

Database connections, as Django handles them per request:
- each job (a Django task or a plain ``@jobmaster.job``) is wrapped in
  ``close_old_connections()`` before and after (``Connections``): a
  connection broken or past ``CONN_MAX_AGE`` is not handed to the next job;
- a connection the master opened (a preloaded app that ran a query) is
  never used by a child: after fork each child lets go of it without a word
  to the server (its socket is pointed at /dev/null, then closed), so the
  master's session, and every sibling's, are untouched; the child opens
  its own when it first needs one. (Closing it the usual way would send
  the server a goodbye on the master's session and end it for everyone.)
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import django
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

import jobmaster
from jobmaster import registry
from jobmaster.client import default_client
from jobmaster.contrib.django import compat, known, records, results
from jobmaster.middleware import JobContext, Middleware

log = logging.getLogger("jobmaster.contrib.django")
SEALED = "(not kept: the task is encrypt=True)"


def setup() -> None:
    """``django.setup()`` unless Django is set up (a web process) or setting up
    (this module imported by an app's import), then each app's ``tasks``."""
    if apps.ready or apps.loading:
        return
    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise ImproperlyConfigured(
            "jobmaster.contrib.django sets Django up for the worker: set "
            "DJANGO_SETTINGS_MODULE in its environment (or set Django up first)"
        )
    django.setup()
    autodiscover_modules("tasks")


class Connections(Middleware):
    """``close_old_connections()`` around each job, in the job's thread."""

    def before_process(self, job: JobContext) -> None:
        close_old_connections()

    def after_process(self, job: JobContext, error: BaseException | None) -> None:
        close_old_connections()

    # An async job's hooks run on the event loop's thread, whose connections
    # are not the job's (Django's async code reaches the database through
    # sync_to_async's threads): nothing to do there.
    async def abefore_process(self, job: JobContext) -> None:
        return None

    async def aafter_process(self, job: JobContext, error: BaseException | None) -> None:
        return None


def forget_inherited_connections() -> None:
    """In a child after fork: drop the master's database connections without
    closing its sessions (see the module's docstring)."""
    for connection in connections.all(initialized_only=True):
        raw = connection.connection
        if raw is None:
            continue
        fileno = getattr(raw, "fileno", None)
        if callable(fileno):
            try:
                descriptor = int(fileno())
                devnull = os.open(os.devnull, os.O_RDWR)
                try:
                    os.dup2(devnull, descriptor)  # the number stays taken: no reuse
                finally:
                    os.close(devnull)
            except (OSError, ValueError, TypeError) as error:  # already closed
                log.debug("connection %s: no socket to let go of: %s", connection.alias, error)
        try:
            connection.close()  # its goodbye goes to /dev/null
        except Exception as error:  # the driver may complain about the socket
            log.debug("connection %s closed with %s", connection.alias, error)
        connection.connection = None


def runner(path: str) -> Callable[..., Any]:
    """The function the job named ``path`` runs: the Django task of that path."""

    def run(*args: Any, **kwargs: Any) -> Any:
        task = known.task_named(path)
        if task is None:  # registered with the task: cannot be missing
            raise LookupError(f"no Django task {path} in this process")
        return _run(task, args, kwargs)

    run.__name__ = path.rpartition(".")[2]
    run.__qualname__ = path
    return run


def _run(task: compat.Task, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    current = jobmaster.current_job()
    jid = current.jid if current is not None else ""
    client = default_client()  # the workers' Redis (the producer's, by the backend's CONFIG)
    backend = task.get_backend()
    ttl = float(getattr(backend, "result_ttl", records.DEFAULT_TTL))
    workers = records.started(client.redis, client.keys, jid, _worker_id(), ttl)
    result = _running(task, jid, args, kwargs, workers)
    compat.task_started.send(type(backend), task_result=result)
    try:
        if task.takes_context:
            value = task.call(compat.TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
    except BaseException as error:
        path = f"{type(error).__module__}.{type(error).__qualname__}"
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        job = registry.lookup(task.module_path)
        # An encrypt=True task's error text often quotes its arguments (SPEC §8):
        # only its class is kept in clear.
        kept = SEALED if job is not None and job.job_options.encrypt else text
        records.finished(client.redis, client.keys, jid, ttl, (path, kept))
        _send_finished(backend, result, compat.TaskResultStatus.FAILED, path, text)
        raise
    records.finished(client.redis, client.keys, jid, ttl)
    object.__setattr__(result, "_return_value", value)
    _send_finished(backend, result, compat.TaskResultStatus.SUCCESSFUL)
    return value


def _running(
    task: compat.Task, jid: str, args: tuple[Any, ...], kwargs: dict[str, Any], workers: list[str]
) -> compat.TaskResult:
    """The TaskResult a running task sees (``context.task_result``)."""
    now = time.time()
    record: dict[str, Any] = {"args": list(args), "kwargs": kwargs, "worker_ids": workers}
    record["last_attempted_at"] = record["started_at"] = now
    current = jobmaster.current_job()
    if current is not None and current.enqueued_at is not None:
        record["enqueued_at"] = current.enqueued_at
    return results.build(task, jid, compat.TaskResultStatus.RUNNING, record, [], task.backend)


def _send_finished(
    backend: Any, result: compat.TaskResult, status: Any, path: str = "", text: str = ""
) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    if path:
        result.errors.append(compat.TaskError(exception_class_path=path, traceback=text))
    try:
        compat.task_finished.send(type(backend), task_result=result)
    except Exception:  # a receiver's failure is not the task's
        log.exception("a task_finished receiver failed for %s", result.id)


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:64]
