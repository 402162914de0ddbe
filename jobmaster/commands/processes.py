"""``jobmaster ps`` and ``jobmaster ctl quiet|resume|stop IDENTITY|--all``.

Both work from Redis alone (heartbeats, control lists), so they see and
reach masters on every host, and need no master on this one. A master reads
its control list every half second and passes quiet/resume on to its
children (as TSTP/CONT): ``--all`` tells masters and lone workers only.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import click

from jobmaster.api import Process, ProcessSet
from jobmaster.commands.common import command_options, json_option, target
from jobmaster.commands.options import SharedOptionsGroup
from jobmaster.commands.output import duration, echo, echo_json, plural, table, yes_no
from jobmaster.errors import NotFound

EFFECT = {
    "quiet": "stop fetching jobs; running ones finish",
    "resume": "fetch jobs again",
    "stop": "graceful stop, as on TERM",
}


def role(process: Process) -> str:
    if process.role == "child":
        suffix = "" if process.master else " (no master)"
        return f"child {process.index}{suffix}"
    return process.role


def capacity(process: Process) -> int:
    """Threads that could run jobs: a master's are its children's."""
    if process.role == "master":
        return process.concurrency * len(process.children)
    return process.concurrency


def memory(process: Process) -> str:
    """A worker process's own memory; a master's container: used / limit (share)."""
    if process.memory_mb is not None:
        return f"{process.memory_mb:.0f} MB"
    limit = process.memory_limit_mb
    if process.role == "master" and limit:
        used = process.memory_used_mb
        return f"{used:.0f}/{limit:.0f} MB ({used / limit:.0%})"
    return "-"


def as_row(process: Process, now: float) -> tuple[object, ...]:
    return (
        process.hostname,
        process.pid,
        role(process),
        ",".join(process.queues) or "-",
        f"{process.busy}/{capacity(process)}",
        memory(process),
        duration(now - process.started_at) if process.started_at else "-",
        yes_no(process.quiet),
        process.identity,
    )


def process_json(process: Process) -> dict[str, Any]:
    data = dataclasses.asdict(process)
    data.pop("info")  # the heartbeat as written: every useful field is above
    extra: dict[str, Any] = {"capacity": capacity(process)}
    if process.role == "master":
        extra["memory_limit_mb"] = process.memory_limit_mb  # the container's; 0: none
        extra["memory_used_mb"] = process.memory_used_mb
    elif process.async_concurrency:  # a worker with an event loop (async jobs)
        extra["async_concurrency"] = process.async_concurrency
        extra["loop_blocked"] = process.loop_blocked  # None, or the job blocking it now
    return {**data, **extra}


@click.command(name="ps")
@json_option
@command_options
def ps_command(as_json: bool, config_file: str | None, redis_url: str | None, debug: bool) -> None:
    """Live masters, their children and lone workers, on every host.

    Each master is followed by its children. BUSY is jobs running / threads;
    MEMORY is a child's own, and for a master its container's (cgroup) usage
    against its limit; IDENTITY is what `jobmaster ctl` takes.
    """
    with target(config_file, redis_url) as t:
        listing = ProcessSet(t.client).listing()
    processes = listing.processes
    for note in listing.notes():  # what was passed over (a flood): on stderr, JSON stays whole
        echo(f"note: {note}", err=True)
    if as_json:
        echo_json([process_json(p) for p in processes])
        return
    if not processes:
        echo("no live jobmaster processes")
        return
    headers = ("HOST", "PID", "ROLE", "QUEUES", "BUSY", "MEMORY", "STARTED", "QUIET", "IDENTITY")
    now = time.time()
    echo(table(headers, (as_row(p, now) for p in processes), right=(1, 4, 5, 6)))


@click.group(name="ctl", cls=SharedOptionsGroup)
def ctl_group() -> None:
    """Quiet, resume or stop processes, on any host.

    IDENTITY is the last column of `jobmaster ps`. A master acts within a
    second and passes quiet/resume on to its children.
    """


def control_command(command: str) -> click.Command:
    @click.command(
        name=command, help=f"{command.capitalize()} IDENTITY or --all: {EFFECT[command]}."
    )
    @click.argument("identity", required=False)
    @click.option("--all", "everyone", is_flag=True, help="Every master and lone worker.")
    @command_options
    def control(
        identity: str | None,
        everyone: bool,
        config_file: str | None,
        redis_url: str | None,
        debug: bool,
    ) -> None:
        if (identity is None) == (not everyone):
            raise click.UsageError("give either IDENTITY (see `jobmaster ps`) or --all")
        with target(config_file, redis_url) as t:
            processes = ProcessSet(t.client)
            if identity is not None:
                if not processes.send(identity, command):
                    raise NotFound(
                        f"no live process {identity!r} (gone, or never was: see `jobmaster ps`)"
                    )
                echo(f"{command}: sent to {identity}")
                return
            told = processes.send_all(command)
        if told:
            echo(f"{command}: sent to {plural(told, 'process', 'processes')}")
        else:
            echo(f"{command}: no live master or worker, nothing sent")

    return control


for _command in ("quiet", "resume", "stop"):
    ctl_group.add_command(control_command(_command))
