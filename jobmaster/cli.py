"""The ``jobmaster`` command (click).

``jobmaster -c FILE`` is ``jobmaster run -c FILE``. The options of ``run``
are generated from the settings registry, so a new setting with a CLI flag
appears here, in ``--help`` and in the README table at once. Errors are one
line on stderr with the exit codes of exitcodes.py; ``--debug`` adds the
traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import redis

from jobmaster import exitcodes, results
from jobmaster.app import check_job, check_periodic, load_app
from jobmaster.client import Client, default_from_config
from jobmaster.commands import register
from jobmaster.commands.options import (
    SharedOptionsGroup,
    config_options,
    load,
    reports_errors,
)
from jobmaster.commands.output import echo, one_line
from jobmaster.config import Config
from jobmaster.connection import check_version, connect, describe_error
from jobmaster.embedded import EmbeddedRedis
from jobmaster.embedded_watch import watching
from jobmaster.errors import ConfigError, JobmasterError, Refused
from jobmaster.failure_hook import ON_FAILURE
from jobmaster.redis_target import RedisTarget
from jobmaster.settings import SETTINGS

F = TypeVar("F", bound=Callable[..., Any])


class DefaultRunGroup(SharedOptionsGroup):
    """A group whose default command is ``run``: ``jobmaster -c FILE`` starts the workers."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # The group's own options stay the group's: --version went to ``run``
        # (and failed with "no such option") before.
        own = ("--help", "-h", "--version")
        handed = self.hand_on(args)  # ``jobmaster -c FILE check``: the file goes to check
        if not handed or (handed[0] not in self.commands and handed[0] not in own):
            handed = ["run", *args]
        return click.Group.parse_args(self, ctx, handed)


def setting_options(func: F) -> F:
    """One option per setting that has a CLI flag, from the registry."""
    for setting in reversed(list(SETTINGS.values())):
        if not setting.cli or setting.name == "redis_url":
            continue
        extras = [f"env: {', '.join(setting.env_vars)}"] if setting.env_vars else []
        extras += [setting.bounds] if setting.bounds else []
        func = click.option(
            *setting.cli,
            setting.name,
            metavar=setting.metavar,  # the value is parsed by load_config, as file and env are
            multiple=setting.multiple,
            default=None,
            help=setting.help + (f"  [{'; '.join(extras)}]" if extras else ""),
        )(func)
    return func


@click.group(cls=DefaultRunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="jobmaster")
def main() -> None:
    """jobmaster: Redis-backed background jobs, run by a supervising master.

    `jobmaster -c jobmaster.toml` is the same as `jobmaster run -c jobmaster.toml`.
    """


@main.command()
@config_options
@setting_options
@reports_errors
def run(config_file: str | None, debug: bool, **overrides: Any) -> None:
    """Start the master and its children (the default command). Flags override the file."""
    from jobmaster.supervisor.build import build_master

    config = load(config_file, overrides)
    with prepared(config) as embedded:
        code = build_master(config, embedded).run()
    sys.exit(code)


@main.command()
@config_options
@setting_options
@reports_errors
def worker(config_file: str | None, debug: bool, **overrides: Any) -> None:
    """Run ONE worker process in the foreground, without a master.

    For debugging, or where something else supervises processes. Nothing
    restarts it if it dies; its jobs are recovered once its heartbeat expires.
    """
    from jobmaster.signals import CHILD_SIGNALS, SignalQueue
    from jobmaster.worker.child import serve

    config = load(config_file, overrides)
    with prepared(config, preload=True) as embedded:  # no fork: always import the app
        signals = SignalQueue(CHILD_SIGNALS)
        signals.install()
        try:
            with watching(embedded):  # a lone worker restarts its embedded Redis too
                code = serve(config, signals)
        finally:
            signals.restore()
    exit_past_job_threads(code)


def exit_past_job_threads(code: int) -> None:
    """Exit with ``code`` after a lone worker's stop, whatever its jobs' threads do.

    Its jobs are back on their queues by now. A job thread stuck in a call
    never held the exit; a thread of the event loop's pools (an async job's
    ``asyncio.to_thread``) did: Python's exit joins every thread of every
    ThreadPoolExecutor, daemon or not, and the process outlived its stop
    until that call returned (a long request, a sleep). With such a thread still running, the exit
    handlers run and the logs are flushed, then the process ends at once.
    """
    from jobmaster.worker.async_runner import LOOP_THREADS

    held = [
        thread
        for thread in threading.enumerate()
        if thread.name.startswith(LOOP_THREADS) and thread.is_alive()
    ]
    if not held:
        sys.exit(code)
    logging.getLogger("jobmaster.cli").warning(
        "exiting without waiting for %d thread(s) still in an async job's blocking call "
        "(its job was pushed back)",
        len(held),
    )
    atexit._run_exitfuncs()  # what sys.exit would run: the app's own exit handlers
    logging.shutdown()
    os._exit(code)


@contextlib.contextmanager
def prepared(config: Config, *, preload: bool | None = None) -> Iterator[EmbeddedRedis | None]:
    """Logging, then the embedded Redis (started first, stopped last), then the app."""
    from jobmaster.log import setup_logging

    setup_logging(config.log_level, config.log_format, config.log_levels)
    embedded = EmbeddedRedis(Path(config.data_dir)) if config.redis_url == "embedded" else None
    if embedded is not None:
        embedded.start()
    default_from_config(config)  # jobs that enqueue jobs use the workers' Redis settings
    try:
        if config.preload if preload is None else preload:
            load_app(config)  # before forking: children share its memory
        yield embedded
    finally:
        if embedded is not None:
            embedded.stop()  # every job was pushed back before this


@main.command()
@config_options
@setting_options
@reports_errors
def check(config_file: str | None, debug: bool, **overrides: Any) -> None:
    """Validate the config, import the app, reach Redis; print what would run."""
    config = load(config_file, overrides)
    own = [name for name in load_app(config) if name != ON_FAILURE]  # the app's, apart
    check_periodic(config)
    lines = [
        f"config:      {config.source or '(none: defaults and environment)'}",
        f"app:         {', '.join(config.app) or '(none)'}",
        f"jobs:        {', '.join(own) or '(none registered)'}",
        f"built in:    {ON_FAILURE} (runs a job's on_failure hook when the master buries it)",
        f"processes:   {config.processes} x {config.concurrency} threads",
        f"queues:      {', '.join(config.queues)}{' (strict order)' if config.strict else ''}",
        f"namespace:   {config.namespace}",
    ]
    lines.append(f"memory:      {memory_summary(config)}")
    if config.secret_key:  # how many keys, never the keys
        lines.append(f"secret_key:  {len(config.secret_key)} key(s), the first one encrypts")
    if config.redis_url == "embedded":
        lines.append(f"redis:       embedded, in {config.data_dir} (started by `jobmaster run`)")
    else:
        try:
            version = check_version(connect(RedisTarget.of(config)))
        except (redis.ConnectionError, redis.TimeoutError) as error:
            # One line that names the server (no password) and, for TLS, what to check.
            raise JobmasterError(
                f"cannot reach Redis at {config.redis_url_masked}: {describe_error(error)}"
            ) from error
        lines.append(
            f"redis:       {config.redis_url_masked} (Redis {'.'.join(map(str, version))})"
        )
    for name, entry in config.periodic.items():
        when = entry.cron if entry.cron is not None else f"every {entry.every:g}s"
        lines.append(f"periodic:    {name}: {entry.job} ({when})")
    echo("\n".join(lines))
    echo("ok")


def memory_summary(config: Config) -> str:
    """The container limit the memory killer will act on, where it was found, and
    the per-child limit (as "auto" would work it out from this process's group)."""
    from jobmaster.cgroups import find_memory_cgroup
    from jobmaster.supervisor.memory import auto_limit_mb

    found = find_memory_cgroup(config.cgroup_root)
    container = found.describe() if found is not None else "no memory cgroup found"
    per_child = config.max_child_mb
    if per_child == "auto":
        usage = found.read() if found is not None else None
        if found is None or found.limit is None:
            return f"container limit {container}; max_child_mb auto: off (no limit)"
        base = usage.working_set if usage is not None else 0
        mb = auto_limit_mb(found.limit, base, config.processes)
        return f"container limit {container}; max_child_mb auto: about {mb} MB per child"
    child = f"{per_child} MB" if per_child else "off"
    return f"container limit {container}; max_child_mb {child}"


@main.command()
@click.argument("job")
@click.argument("json_args", nargs=-1, metavar="[JSON_ARG]...")
@click.option("--queue", "queue", default="default", show_default=True, help="Queue to push to.")
@click.option(
    "--in",
    "delay",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Run it this many seconds from now.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Enqueue even a job that the config's app does not register (exit 7 without it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@config_options
@reports_errors
def enqueue(
    job: str,
    json_args: tuple[str, ...],
    queue: str,
    delay: float | None,
    force: bool,
    as_json: bool,
    config_file: str | None,
    redis_url: str | None,
    debug: bool,
) -> None:
    """Enqueue JOB with arguments given as JSON values: jobmaster enqueue app.add 1 2.

    A JOB that the config's app imports here but does not register is refused
    (exit 7) unless --force: no worker would run it. Without the app (none in
    the config, or not importable here) it cannot be checked: it is enqueued,
    and stderr says it was not checked.
    """
    args = []
    for index, text in enumerate(json_args):
        try:
            args.append(json.loads(text))
        except ValueError as error:
            raise ConfigError(f"argument {index} ({text!r}) is not JSON: {error}") from None
    config = load(config_file, {"redis_url": redis_url})
    checked = check_job(config, job)
    if checked.registered is False and not force:
        raise Refused(f"{checked.why} (--force to enqueue it anyway)")
    if checked.why:
        echo(f"jobmaster: warning: {checked.why}", err=True)
    client = Client.from_config(config)
    item: dict[str, Any] = {"job": job, "args": args, "queue": queue}
    if delay is not None:
        import time

        item["at"] = time.time() + delay
    jid = client.push(item)
    echo(json.dumps({"jid": jid}) if as_json else jid or "not enqueued (a middleware dropped it)")


# -- jobmaster periodic ----------------------------------------------------------
@main.group(cls=SharedOptionsGroup)
def periodic() -> None:
    """The [periodic.NAME] entries: list them, enable or disable one on every master."""


def periodic_source(config_file: str | None, redis_url: str | None) -> Any:
    """The config's own entries with -c FILE; else the ones the last master registered."""
    config = load(config_file, {"redis_url": redis_url})
    if config_file is not None:
        return config
    return Client.from_config(config)


@periodic.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
@config_options
@reports_errors
def periodic_list(
    as_json: bool, config_file: str | None, redis_url: str | None, debug: bool
) -> None:
    """Each entry with its schedule, whether it is enabled, its last and next run."""
    from jobmaster.periodic import list_periodic, when

    rows = list_periodic(periodic_source(config_file, redis_url))
    if as_json:
        echo(json.dumps(rows, indent=2))
        return
    if not rows:
        echo("no periodic entries")
        return
    for row in rows:
        state = "enabled" if row["enabled"] else "disabled"
        if row["override"] is not None:
            state += " (at run time)"
        last = when(row["last_run"]) if row["last_run"] is not None else "never"
        upcoming = when(row["next_run"]) if row["next_run"] is not None else "-"
        echo(
            f"{row['name']}: {row['job']} on {row['queue']}, {row['schedule']}, {state}; "
            f"last {last}, next {upcoming}"
        )


@periodic.command("enable")
@click.argument("name")
@config_options
@reports_errors
def periodic_enable(name: str, config_file: str | None, redis_url: str | None, debug: bool) -> None:
    """Enable NAME on every master, whatever the config says."""
    from jobmaster.periodic import enable

    enable(name, periodic_source(config_file, redis_url))
    echo(f"{name}: enabled")


@periodic.command("disable")
@click.argument("name")
@config_options
@reports_errors
def periodic_disable(
    name: str, config_file: str | None, redis_url: str | None, debug: bool
) -> None:
    """Disable NAME on every master until `jobmaster periodic enable NAME`."""
    from jobmaster.periodic import disable

    disable(name, periodic_source(config_file, redis_url))
    echo(f"{name}: disabled")


@main.command(name="status")
@click.argument("jid")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@config_options
@reports_errors
def status_command(
    jid: str, as_json: bool, config_file: str | None, redis_url: str | None, debug: bool
) -> None:
    """Show a job's status, its attempts and, once complete, its result (kept
    status_ttl seconds, or the job's result_ttl). Exit 6 if the job is unknown."""
    config = load(config_file, {"redis_url": redis_url})
    client = Client.from_config(config)
    state, tries = client.status(jid), client.attempts(jid)
    shown = results.preview(client.redis, client.keys, jid) if state == "complete" else None
    if as_json:
        found: dict[str, Any] = {"jid": jid, "status": state, "attempts": tries}
        if state == "complete":  # a truncated result is its first 64 KiB of text
            found["result"] = shown.value if shown else None
            found["result_bytes"] = shown.size if shown else 0
        echo(json.dumps(found))
        exit_if_unknown(state)
        return
    echo(f"{jid}: {one_line(state or 'unknown (never seen, or expired)')}")
    if state == "complete":
        more = f" … ({shown.size:,} bytes in all)" if shown and shown.truncated else ""
        echo(f"  result: {one_line(shown.text) if shown else 'None'}{more}")
    for number, attempt in enumerate(tries, 1):
        echo(f"  attempt {number}: {attempt_line(attempt)}")
    exit_if_unknown(state)


def exit_if_unknown(state: str | None) -> None:
    """As `cancel` of an unknown job: a script need not parse the line."""
    if state is None:
        sys.exit(exitcodes.NOT_FOUND)


def attempt_line(attempt: dict[str, Any]) -> str:
    """``dead in 12 ms on host:1:abc ValueError: no``: each field one line, a
    time missing or forged shown as ``-`` (results.attempts made them safe)."""
    started, ended = attempt.get("started_at"), attempt.get("ended_at")
    took = f"{(ended - started) * 1000:.0f} ms" if started and ended else "-"
    error = ""
    if attempt.get("error_class"):
        error = f" {attempt['error_class']}: {attempt.get('error_message') or ''}"
    return one_line(f"{attempt.get('outcome')} in {took} on {attempt.get('worker')}{error}")


# The operator's commands (stats, ps, ctl, dead|retries|scheduled, queue) live in
# jobmaster/commands/.
register(main)
