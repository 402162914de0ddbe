"""Django's Tasks framework where this Django has it: ``django.tasks`` (Django
>= 6.0, Python >= 3.12), else the ``django-tasks`` backport (Django 4.2-5.2).

The two have the same names in the same places; only the exceptions'
spelling differs (``InvalidTask`` / ``InvalidTaskError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the backport ships types; Django itself ships none
    from typing import Any, TypeAlias

    from django_tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import DEFAULT_TASK_PRIORITY, TaskContext, TaskError, TaskResultStatus
    from django_tasks.base import Task as _Task
    from django_tasks.base import TaskResult as _TaskResult

    # Django 6's are not generic: one spelling for both.
    Task: TypeAlias = _Task[..., Any]
    TaskResult: TypeAlias = _TaskResult[Any]
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

    BUILT_IN = False
else:
    try:
        from django.tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import (
            DEFAULT_TASK_PRIORITY,
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started

        BUILT_IN = True
    except ImportError:
        try:
            from django_tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
        except ImportError:
            raise ImportError(
                "jobmaster.contrib.django needs Django >= 6.0 (django.tasks) or, on an "
                "older Django, the django-tasks backport: pip install django-tasks"
            ) from None
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            DEFAULT_TASK_PRIORITY,
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started

        BUILT_IN = False

__all__ = [
    "BUILT_IN",
    "DEFAULT_TASK_PRIORITY",
    "DEFAULT_TASK_QUEUE_NAME",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
