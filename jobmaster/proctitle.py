"""Process titles, so ``ps`` shows what each jobmaster process is doing."""

from __future__ import annotations

import setproctitle


def master_title(alive: int, wanted: int, queues: list[str], state: str = "") -> str:
    suffix = f" {state}" if state else ""
    return f"jobmaster master [{alive}/{wanted} children] {','.join(queues)}{suffix}"


def child_title(index: int, busy: int, concurrency: int, queues: list[str], state: str = "") -> str:
    suffix = f" {state}" if state else ""
    return f"jobmaster child {index} [{busy}/{concurrency} busy] {','.join(queues)}{suffix}"


def set_title(title: str) -> None:
    setproctitle.setproctitle(title)
