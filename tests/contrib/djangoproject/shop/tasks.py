"""The shop's tasks, as an app defines them for Django's Tasks framework.

At import (in the worker's master, preloaded) it runs a query, as apps do
(warming a cache, reading a setting from the database): the master then
holds a database connection that every child inherits across fork. On
PostgreSQL it notes that session's backend pid, so the test can check that
no child ended it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from django.db import connection

import jobmaster
from jobmaster.contrib.django import compat, jobmaster_options

try:
    from django.tasks import task
except ImportError:  # Django < 6: the backport
    from django_tasks import task


class OutOfStock(Exception):
    pass


if os.environ.get("DJANGO_TEST_DATABASE"):  # the worker's master, not the test process
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS shop_note (id INTEGER, text VARCHAR(100))")
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_backend_pid()")
            master_session = cursor.fetchone()[0]
            with open(os.environ["DJANGO_TEST_MASTER_SESSION"], "w") as file:
                file.write(str(master_session))


@jobmaster.on_child_start
def warm_up() -> None:
    """A child's first query, before any job (as an app warms a cache): on a
    session of its own, never the master's. Noted as the row ``id = -1``."""
    if not os.environ.get("DJANGO_TEST_DATABASE"):
        return
    with connection.cursor() as cursor:
        session = "-"
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_backend_pid()")
            session = str(cursor.fetchone()[0])
        cursor.execute("INSERT INTO shop_note (id, text) VALUES (-1, %s)", [session])


@task
def sessions() -> list[str]:
    """What the children's warm-ups noted."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT text FROM shop_note WHERE id = -1")
        return [text for (text,) in cursor.fetchall()]


@task
def add(a: int, b: int) -> dict[str, Any]:
    """A sum, written to and counted in the database of the child that runs it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO shop_note (id, text) VALUES (%s, %s)", [a, f"pid {os.getpid()}"]
        )
        cursor.execute("SELECT COUNT(*) FROM shop_note WHERE id = %s", [a])
        (rows,) = cursor.fetchone()
    return {"sum": a + b, "pid": os.getpid(), "rows": rows}


@task(queue_name="emails")
def refuse(order: int) -> None:
    raise OutOfStock(f"order {order}: nothing left")


@task(takes_context=True)
@jobmaster_options(retry=1, backoff=0)
def second_time_lucky(context: compat.TaskContext, order: int) -> dict[str, Any]:
    """Fails on its first attempt; jobmaster retries it (its options ask)."""
    if context.attempt == 1:
        raise OutOfStock(f"order {order}: try again")
    return {"attempt": context.attempt, "id": context.task_result.id}


@task(jobmaster_options={"timeout": 0.5})  # @task's extra keywords reach the backend
def too_slow(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # Python code between sleeps: where a timeout lands
        time.sleep(0.05)


@task(jobmaster_options={"unique": "until_executed"})
def sync_account(account: int) -> int:
    return account


@task(jobmaster_options={"encrypt": True})
def charge_card(card: str) -> None:
    raise OutOfStock(f"card {card} declined")


@task
def crash() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # its worker process dies under it


@task
async def wait_a_bit(order: int) -> int:
    await asyncio.sleep(0.01)
    return order
