"""The Django tasks this process knows, by module path: the backend adds each as
it is made (registering its job), the worker's runs and ``get_result`` look
them up. Nothing is imported by a path read from Redis."""

from __future__ import annotations

from jobmaster.contrib.django import compat

# A task's module path -> the task (the first made: .using() copies share its
# function and its job).
_TASKS: dict[str, compat.Task] = {}


def remember(task: compat.Task) -> None:
    _TASKS.setdefault(task.module_path, task)


def knows(path: str) -> bool:
    return path in _TASKS


def task_named(path: object) -> compat.Task | None:
    """The task registered under ``path`` in this process, or None."""
    return _TASKS.get(path) if isinstance(path, str) else None
