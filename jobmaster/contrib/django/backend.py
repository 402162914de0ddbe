"""``JobmasterBackend``: Django's Tasks framework on jobmaster (docs/integrations.md).

A task is a jobmaster job named after its module path
(``myapp.tasks.send_welcome``): ``JobmasterTask`` registers it as it is
made, wherever its module is imported, so a worker that imported the app's
``tasks`` modules runs exactly those tasks and nothing named in Redis. A
task's id (``TaskResult.id``) is its job's jid.

- ``run_after``: scheduled (jobmaster's scheduled set). ``supports_defer``.
- ``queue_name``: the jobmaster queue, one of the backend's ``QUEUES``.
- ``priority``: refused (jobmaster has weighted queues, not per-job
  priorities): give urgent tasks a queue of their own and weigh it in the
  worker's ``queues`` setting.
- Async (``async def``) tasks run in a worker thread through asgiref, as
  Django's own backends call them.
- Retries: none, as Django's contract says (a failing task is FAILED), unless
  the task's jobmaster options ask for them: ``@task(jobmaster_options={"retry":
  3, "timeout": 30})`` (Django 6.1 and the backport pass ``@task``'s extra
  keywords to the backend's task class), or ``@jobmaster_options(...)`` under
  ``@task`` on any version. Any ``@jobmaster.job`` option but ``name`` and
  ``queue``: ``retry``, ``backoff``, ``timeout``, ``unique``, ``expires_in``,
  ``result_ttl``, ``encrypt``, ``middleware``...
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.core import checks
from django.utils import timezone

import jobmaster
from jobmaster import crypto, registry
from jobmaster import payload as wire
from jobmaster.client import Client, default_client
from jobmaster.contrib.django import compat, known, records, results, worker
from jobmaster.errors import ConfigError, EnqueueError
from jobmaster.job import JobFunction
from jobmaster.job_options import OPTION_NAMES, JobOptions
from jobmaster.queue_names import queue_name
from jobmaster.unique import digest, lock_ttl

F = TypeVar("F", bound=Callable[..., Any])

DJANGO_RETRY = 0  # Django's contract: FAILED at the first failure, unless asked
OPTION_KEYS = frozenset({"CONFIG", "REDIS_URL", "NAMESPACE", "RESULT_TTL"})
TASK_OPTIONS = OPTION_NAMES - {"name", "queue"}
PRIORITY_REFUSED = (
    "jobmaster has no per-task priority: give the task a queue of its own "
    "(queue_name=...) and weigh that queue in the worker's queues setting "
    '(queues = ["urgent:5", "default"])'
)


class DuplicateTask(Exception):
    """A ``unique`` task's enqueue while the same task holds its lock: not enqueued."""


def jobmaster_options(**options: Any) -> Callable[[F], F]:
    """jobmaster's options for a task, on any Django: put it under ``@task``::

    @task
    @jobmaster_options(retry=3, timeout=30)
    def send_welcome(user_id: int) -> None: ...
    """
    _check_options(options)

    def mark(func: F) -> F:
        func.jobmaster_options = dict(options)  # type: ignore[attr-defined]
        return func

    return mark


@dataclass(frozen=True, slots=True, kw_only=True)
class JobmasterTask(compat.Task):
    """Django's Task, registered as a jobmaster job as it is made."""

    jobmaster_options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        compat.Task.__post_init__(self)  # the backend's validate_task
        register(self)

    def options_for_jobmaster(self) -> dict[str, Any]:
        marked = getattr(self.func, "jobmaster_options", None) or {}
        return {"retry": DJANGO_RETRY, **marked, **(self.jobmaster_options or {})}


def register(task: compat.Task) -> JobFunction[..., Any]:
    """The job that runs ``task`` (made once per module path)."""
    path = task.module_path
    registered = registry.lookup(path)
    if known.knows(path) and isinstance(registered, JobFunction):
        return registered
    options = task.options_for_jobmaster() if isinstance(task, JobmasterTask) else {}
    made = jobmaster.job(name=path, queue=task.queue_name, **options)(worker.runner(path))
    known.remember(task)
    return made


class JobmasterBackend(compat.BaseTaskBackend):
    """``TASKS = {"default": {"BACKEND": "jobmaster.contrib.django.JobmasterBackend"}}``.

    OPTIONS (all optional): ``CONFIG`` (the workers' jobmaster.toml: its
    Redis, namespace and secret key), or ``REDIS_URL`` and ``NAMESPACE``;
    else the producer defaults (``JOBMASTER_REDIS_URL``, ``REDIS_URL``).
    ``RESULT_TTL``: seconds a result is kept after the task ends (a week).
    """

    task_class = JobmasterTask  # type: ignore[assignment]  # the backport's ParamSpec
    supports_defer = True
    supports_async_task = True  # run in a worker thread through asgiref
    supports_get_result = True
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.result_ttl = float(self.options.get("RESULT_TTL", records.DEFAULT_TTL))

    # -- the client --------------------------------------------------------
    @property
    def client(self) -> Client:
        return _client(
            self.options.get("CONFIG"), self.options.get("REDIS_URL"), self.options.get("NAMESPACE")
        )

    # -- validation ----------------------------------------------------------
    def validate_task(self, task: compat.Task) -> None:
        if task.priority != compat.DEFAULT_TASK_PRIORITY:
            raise compat.InvalidTask(f"priority {task.priority}: {PRIORITY_REFUSED}")
        super().validate_task(task)
        try:
            queue_name(task.queue_name)
        except ValueError as error:
            raise compat.InvalidTask(f"queue_name {task.queue_name!r}: {error}") from None
        if isinstance(task, JobmasterTask):
            try:
                _check_options(task.options_for_jobmaster())
            except (TypeError, ValueError) as error:
                raise compat.InvalidTask(f"{task.module_path}: {error}") from None

    # -- enqueue -------------------------------------------------------------
    def enqueue(self, task: compat.Task, args: Any, kwargs: Any) -> compat.TaskResult:
        self.validate_task(task)
        job = register(task)
        options = job.job_options
        client = self.client
        at = _unix(task.run_after) if task.run_after is not None else None
        built = wire.build(
            task.module_path,
            list(args),
            dict(kwargs),
            queue=task.queue_name,
            retry=options.retry,
            extra=options.payload_fields(),
        )
        jid = str(built["jid"])
        now = time.time()
        record = {
            "task": task.module_path,
            "backend": self.alias,
            "queue": task.queue_name,
            # An encrypt=True task's arguments are sealed in its payload: never
            # kept in clear beside it (its TaskResult shows none).
            "args": [] if options.encrypt else built["args"],
            "kwargs": {} if options.encrypt else built["kwargs"],
            "enqueued_at": now,
        }
        wait = max(0.0, (at or now) - now)
        # Written first: the worker's writes touch other fields (records.py).
        records.write(client.redis, client.keys, jid, record, wait + self.result_ttl)
        if options.encrypt:
            crypto.seal_payload(built)
        try:
            pushed = _push(job, client, built, at)
        except BaseException:
            client.redis.delete(records.key(client.keys, jid))
            raise
        if not pushed:
            client.redis.delete(records.key(client.keys, jid))
            if options.unique is not None:
                raise DuplicateTask(
                    f"{task.module_path} is unique and already enqueued or running: not enqueued"
                )
            # Django's enqueue returns a result, which a job never pushed cannot have.
            raise EnqueueError(f"{task.module_path}: a client middleware dropped it")
        result = results.build(task, jid, compat.TaskResultStatus.READY, record, [], self.alias)
        compat.task_enqueued.send(type(self), task_result=result)
        return result

    # -- results -------------------------------------------------------------
    def get_result(self, result_id: str) -> compat.TaskResult:
        client = self.client
        jid = str(result_id)
        if not wire.key_safe(jid):
            raise compat.TaskResultDoesNotExist(result_id)
        # The status first: a run writes its record (worker, error) before its
        # FINISH writes the status, so a record read after an ended status has
        # every attempt. Read the other way round, a run ending between the two
        # reads showed FAILED with no attempt, or SUCCESSFUL with one too few.
        status = client.status(jid)
        record = records.read(client.redis, client.keys, jid)
        task = known.task_named(record.get("task")) if record else None
        if record is None or task is None:
            raise compat.TaskResultDoesNotExist(result_id)
        state = results.state(status, record)
        errors = results.errors(record, state, status)
        result = results.build(task, jid, state, record, errors, self.alias)
        if state == compat.TaskResultStatus.SUCCESSFUL:
            try:
                value = client.result(jid)
            except jobmaster.JobmasterError:  # its status expired meanwhile
                value = None
            object.__setattr__(result, "_return_value", value)
        return result

    # -- checks --------------------------------------------------------------
    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        found: list[checks.CheckMessage] = list(super().check(**kwargs))
        where = f"TASKS[{self.alias!r}]"
        for name in sorted(self.queues):
            try:
                queue_name(name)
            except ValueError as error:
                found.append(
                    checks.Error(f"{where}['QUEUES']: {name!r} {error}", id="jobmaster.E001")
                )
        unknown = set(self.options) - OPTION_KEYS
        if unknown:
            found.append(
                checks.Error(
                    f"{where}['OPTIONS']: unknown option(s) {', '.join(sorted(unknown))}",
                    hint=f"known: {', '.join(sorted(OPTION_KEYS))}",
                    id="jobmaster.E002",
                )
            )
        try:
            self.client  # noqa: B018 - reads the config file, sends nothing
        except (ConfigError, OSError, ValueError) as error:
            found.append(checks.Error(f"{where}['OPTIONS']: {error}", id="jobmaster.E003"))
        return found


def _push(
    job: JobFunction[..., Any], client: Client, built: dict[str, Any], at: float | None
) -> bool:
    """Push the task's payload as ``job.enqueue`` would; False: not pushed (a unique
    task's duplicate, or a client middleware dropped it)."""
    options = job.job_options
    if options.unique is not None:
        built["unique"] = options.unique
        built["unique_digest"] = digest(
            job.name, built["args"], built["kwargs"], options.unique_args
        )
        return client.push_unique(built, lock_ttl(options.unique), at=at)
    return bool(client.push_payloads([built], at=at))


def _check_options(options: Mapping[str, Any]) -> None:
    unknown = set(options) - TASK_OPTIONS
    if unknown:
        raise TypeError(
            f"unknown jobmaster option(s) {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(TASK_OPTIONS))})"
        )
    if options:
        JobOptions(**options)  # its own checks of each value


_clients: dict[tuple[Any, Any, Any], Client] = {}


def _client(config: Any, url: Any, namespace: Any) -> Client:
    """One client per set of options, shared by every thread's backend."""
    key = (config, url, namespace)
    if key == (None, None, None):
        return default_client()
    client = _clients.get(key)
    if client is None:
        if config is not None:
            from jobmaster.config import load_config

            client = Client.from_config(load_config(config))
        else:
            client = Client(url, namespace=namespace or "jobmaster")
        _clients[key] = client
    return client


def _unix(when: datetime.datetime) -> float:
    if timezone.is_naive(when):  # USE_TZ = False: Django's naive times are TIME_ZONE's
        when = timezone.make_aware(when, timezone.get_default_timezone())
    return when.timestamp()
