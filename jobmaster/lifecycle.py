"""Lifecycle hooks: code of the app's that runs as the master and its children start and stop.

A preloaded app opens things the master must not share with its children:
a database pool, an HTTP session, an SDK's sender thread. A fork copies the
sockets of a pool into every child (two processes then talk on one
connection and read each other's replies) and none of the threads (a
sender thread simply does not exist in a child). ``on_child_start`` is
where the app reopens them, in each child, after fork and before its first
job (Celery's ``worker_process_init``, gunicorn's ``post_fork``)::

    @jobmaster.on_master_start      # the master, after the app import, before the first fork
    def warm() -> None: ...
    @jobmaster.on_child_start       # every worker process, before its first job
    def reconnect() -> None: ...
    @jobmaster.on_child_stop        # every worker process, after its last job (graceful stop)
    def flush() -> None: ...

Several hooks of a kind run in the order they were registered; registering
the same function twice (a module imported twice) registers it once. What a
failure does depends on where it happens, and is decided by the caller:

- ``on_master_start`` raises: the master stops before any fork, exit code 1
  (a runtime failure: a supervisor such as systemd may start it again);
- ``on_child_start`` raises: that child exits before it fetches anything,
  with ``exitcodes.CHILD_START_FAILED``: a crash at start for the master,
  which backs off (no fork storm) and forks again; nothing was fetched, so
  nothing is lost;
- ``on_child_stop`` raises: logged; the child's jobs are already recorded
  or pushed back, so it still stops cleanly, and the next hook still runs.

Each failure is logged with its traceback, naming the hook.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal, TypeVar

from jobmaster.errors import JobmasterError

log = logging.getLogger("jobmaster.lifecycle")

Kind = Literal["on_master_start", "on_child_start", "on_child_stop"]
Hook = Callable[[], object]
H = TypeVar("H", bound=Hook)

_HOOKS: dict[Kind, list[Hook]] = {"on_master_start": [], "on_child_start": [], "on_child_stop": []}


class HookFailed(JobmasterError):
    """A lifecycle hook raised: the process it ran in cannot serve as the app expects.

    Not an ``AppImportError`` on purpose: that one halts the master for good
    when a child reports it, while a child's start hook may fail for a
    moment (its database restarting) and is retried under the backoff.
    """


def _register(kind: Kind, hook: H) -> H:
    if not callable(hook):
        raise TypeError(f"@jobmaster.{kind} decorates a function, got {hook!r}")
    if hook not in _HOOKS[kind]:
        _HOOKS[kind].append(hook)
    return hook


def on_master_start(hook: H) -> H:
    """Run ``hook()`` in the master once, after the app import, before the first fork."""
    return _register("on_master_start", hook)


def on_child_start(hook: H) -> H:
    """Run ``hook()`` in every worker process after fork, before its first job."""
    return _register("on_child_start", hook)


def on_child_stop(hook: H) -> H:
    """Run ``hook()`` in every worker process after its last job, on a graceful stop."""
    return _register("on_child_stop", hook)


def registered(kind: Kind) -> list[Hook]:
    """The hooks of ``kind``, in registration order (a copy)."""
    return list(_HOOKS[kind])


def unregister(kind: Kind, hook: Hook) -> None:
    """Forget one hook (tests; an app has no reason to)."""
    if hook in _HOOKS[kind]:
        _HOOKS[kind].remove(hook)


def _name(hook: Hook) -> str:
    module = getattr(hook, "__module__", None) or "?"
    return f"{module}.{getattr(hook, '__qualname__', repr(hook))}"


def run_master_start() -> None:
    """Run every ``on_master_start`` hook; the first that raises stops the start
    (``HookFailed``, its traceback logged)."""
    _run_strictly("on_master_start")


def run_child_start() -> None:
    """Run every ``on_child_start`` hook; the first that raises ends this child's
    start (``HookFailed``, its traceback logged): a child half set up (its pool
    not reopened) would run jobs on the master's connections."""
    _run_strictly("on_child_start")


def run_child_stop() -> int:
    """Run every ``on_child_stop`` hook, each whatever the others did; returns
    how many raised (each logged with its traceback)."""
    failed = 0
    for hook in registered("on_child_stop"):
        try:
            hook()
        except Exception:
            failed += 1
            log.exception("on_child_stop hook %s failed", _name(hook))
    return failed


def _run_strictly(kind: Kind) -> None:
    for hook in registered(kind):
        try:
            hook()
        except Exception as error:
            log.exception("%s hook %s failed", kind, _name(hook))
            raise HookFailed(
                f"{kind} hook {_name(hook)} failed: {type(error).__name__}: {error}"
            ) from error
