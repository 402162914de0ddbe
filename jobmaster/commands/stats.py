"""``jobmaster stats`` and ``jobmaster queue list|pause|resume|clear NAME``.

Both read the queues through ``Stats`` (two pipelined round trips, whatever
the number of queues), so they are cheap enough to run in a ``watch`` loop.
"""

from __future__ import annotations

from dataclasses import asdict

import click

from jobmaster.api import Queue, QueueStats, Stats
from jobmaster.commands.common import command_options, confirm, json_option, target, yes_option
from jobmaster.commands.options import SharedOptionsGroup
from jobmaster.commands.output import duration, echo, echo_json, plural, table, yes_no


def queue_table(queues: list[QueueStats]) -> str:
    if not queues:
        return "no queues yet (a queue appears with its first job)"
    rows = [(q.name, q.size, duration(q.latency), yes_no(q.paused)) for q in queues]
    return table(("QUEUE", "SIZE", "LATENCY", "PAUSED"), rows, right=(1, 2))


@click.command(name="stats")
@json_option
@command_options
def stats_command(
    as_json: bool, config_file: str | None, redis_url: str | None, debug: bool
) -> None:
    """Queues, busy threads, the three sets, processed, failed and expired counts.

    Per queue: its size, its latency (the age of its oldest job) and whether
    it is paused. Counters "today" are per UTC day, as the workers count them.
    """
    with target(config_file, redis_url) as t:
        stats = Stats(t.client)
    if as_json:
        echo_json(stats.as_dict())
        return
    echo(queue_table(stats.queues))
    echo()
    lines = [
        (
            "busy",
            f"{stats.busy} ({plural(stats.processes, 'process', 'processes')}, "
            f"{plural(stats.masters, 'master')})",
        ),
        ("enqueued", str(stats.enqueued)),
        ("scheduled", str(stats.scheduled_size)),
        ("retries", str(stats.retry_size)),
        ("dead", str(stats.dead_size)),
        ("processed", f"{stats.processed_today} today (UTC), {stats.processed} total"),
        ("failed", f"{stats.failed_today} today (UTC), {stats.failed} total"),
        ("cancelled", f"{stats.cancelled} total"),
        ("expired", f"{stats.expired_today} today (UTC), {stats.expired} total"),
    ]
    for name, value in lines:
        echo(f"{name + ':':<11}{value}")


@click.group(name="queue", cls=SharedOptionsGroup)
def queue_group() -> None:
    """List the queues; pause, resume or clear one."""


@queue_group.command(name="list")
@json_option
@command_options
def queue_list(as_json: bool, config_file: str | None, redis_url: str | None, debug: bool) -> None:
    """Every known queue with its size, latency and whether it is paused."""
    with target(config_file, redis_url) as t:
        queues = Stats(t.client).queues
    if as_json:
        echo_json([asdict(q) for q in queues])
    else:
        echo(queue_table(queues))


@queue_group.command(name="pause")
@click.argument("name")
@command_options
def queue_pause(name: str, config_file: str | None, redis_url: str | None, debug: bool) -> None:
    """Workers stop taking NAME's jobs (running ones finish); its jobs stay queued."""
    with target(config_file, redis_url) as t:
        Queue(name, t.client).pause()
    echo(f"{name}: paused (`jobmaster queue resume {name}` to resume)")


@queue_group.command(name="resume")
@click.argument("name")
@command_options
def queue_resume(name: str, config_file: str | None, redis_url: str | None, debug: bool) -> None:
    """Workers take NAME's jobs again (idle ones are woken at once)."""
    with target(config_file, redis_url) as t:
        Queue(name, t.client).resume()
    echo(f"{name}: resumed")


@queue_group.command(name="clear")
@click.argument("name")
@yes_option
@command_options
def queue_clear(
    name: str, yes: bool, config_file: str | None, redis_url: str | None, debug: bool
) -> None:
    """Delete every job waiting in NAME (asks first unless --yes)."""
    with target(config_file, redis_url) as t:
        queue = Queue(name, t.client)
        size = queue.size()
        if not size:
            echo(f"{name}: already empty")
            return
        confirm(f"Delete the {plural(size, 'job')} waiting in queue {name}?", yes)
        deleted = queue.clear()
    echo(f"{name}: deleted {plural(deleted, 'job')}")
