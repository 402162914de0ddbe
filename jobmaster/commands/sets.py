"""``jobmaster dead|retries|scheduled list|show|retry|delete|clear``, and ``kill``
for the retry and scheduled sets.

One group per sorted set, built by one factory: the three differ only in
the API class and in what an entry's time means (when it died, when it is
retried, when it is due). Entries that are not valid payloads are listed
with their raw text; they can be deleted, never retried.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from jobmaster.api import DeadSet, JobSet, KillableSet, RetrySet, ScheduledSet, SortedEntry
from jobmaster.commands.common import (
    Target,
    command_options,
    confirm,
    json_option,
    target,
    yes_option,
)
from jobmaster.commands.options import SharedOptionsGroup
from jobmaster.commands.output import (
    clip,
    echo,
    echo_json,
    one_line,
    plural,
    relative,
    table,
    timestamp,
)
from jobmaster.errors import JobmasterError, NotFound

DEFAULT_LIMIT = 50
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class SetKind:
    command: str  # the group's name: dead, retries, scheduled
    api: type[JobSet]
    title: str  # "the dead set"
    when: str  # what the score means, as a column header
    help: str

    def open(self, t: Target) -> JobSet:
        return self.api(t.client, limits=t.dead_limits)


KINDS = (
    SetKind(
        "dead", DeadSet, "the dead set", "DIED", "Jobs that failed for good (or could not run)."
    ),
    SetKind(
        "retries", RetrySet, "the retry set", "NEXT TRY", "Failed jobs waiting out their backoff."
    ),
    SetKind("scheduled", ScheduledSet, "the scheduled set", "DUE", "Jobs enqueued to run later."),
)


def error_text(entry: SortedEntry) -> str | None:
    if entry.payload is None and entry.oversized:
        return f"too long to read: {entry.length:,} bytes"
    if entry.payload is None:
        return f"not a payload: {entry.text}"
    if entry.error_class:
        return f"{entry.error_class}: {entry.error_message or ''}".rstrip(": ")
    return None


def entry_json(entry: SortedEntry) -> dict[str, Any]:
    """The columns of a row plus the whole entry (``payload``, or ``raw`` for garbage)."""
    data = {
        "jid": entry.jid,
        "job": entry.job,
        "queue": entry.queue,
        "at": entry.at,
        "error_class": entry.error_class,
        "error_message": entry.error_message,
        "retry_count": entry.retry_count,
        "retries": entry.retries,
        "runnable": entry.runnable,
        **entry.as_dict(),
    }
    if entry.at == entry.score:
        data.pop("score")  # the same as "at"; kept when no date can be shown for it
    return data


def entry_row(entry: SortedEntry, now: float) -> tuple[object, ...]:
    return (
        entry.jid or "-",
        entry.job or "-",
        entry.queue or "-",
        clip(error_text(entry)),
        relative(entry.at, now),
        entry.retries,
    )


def check_selector(jid: str | None, job: str | None, error: str | None, everyone: bool) -> None:
    """Exactly one of JID, a filter (--job and/or --error) or --all: a bulk move by
    mistake cannot be undone."""
    given = [jid is not None, job is not None or error is not None, everyone]
    if sum(given) != 1:
        raise click.UsageError("give exactly one of JID, --job NAME / --error CLASS, or --all")


def selector_options(func: F) -> F:
    func = click.option("--all", "everyone", is_flag=True, help="Every entry.")(func)
    func = click.option(
        "--error", default=None, metavar="CLASS", help="Entries failed with CLASS."
    )(func)
    func = click.option("--job", default=None, metavar="NAME", help="Entries of job NAME.")(func)
    return click.argument("jid", required=False)(func)


def filter_options(func: F) -> F:
    func = click.option("--error", default=None, metavar="CLASS", help="Only errors of CLASS.")(
        func
    )
    return click.option("--job", default=None, metavar="NAME", help="Only jobs named NAME.")(func)


def list_command(kind: SetKind) -> click.Command:
    """``list``: a table of entries, filtered, limited."""

    @click.command(name="list")
    @filter_options
    @click.option(
        "--limit",
        default=DEFAULT_LIMIT,
        show_default=True,
        type=click.IntRange(min=0),
        help="Show at most N entries (0: all).",
        metavar="N",
    )
    @json_option
    @command_options
    def list_entries(
        job: str | None,
        error: str | None,
        limit: int,
        as_json: bool,
        config_file: str | None,
        redis_url: str | None,
        debug: bool,
    ) -> None:
        """Entries, earliest first: jid, job, queue, error, time, retry count."""
        with target(config_file, redis_url) as t:
            found = kind.open(t).filter(job, error)
            entries = list(itertools.islice(found, limit + 1 if limit else None))
        more = bool(limit) and len(entries) > limit
        entries = entries[:limit] if limit else entries
        if as_json:
            echo_json([entry_json(e) for e in entries])
            return
        if not entries:
            echo(f"nothing in {kind.title}" + (" matches" if job or error else ""))
            return
        now = time.time()
        headers = ("JID", "JOB", "QUEUE", "ERROR", kind.when, "RETRIES")
        echo(table(headers, (entry_row(e, now) for e in entries), right=(5,)))
        if more:
            echo(f"(first {limit} shown: --limit 0 for all)")

    return list_entries


def show_command(kind: SetKind) -> click.Command:
    """``show JID``: one entry whole."""

    @click.command(name="show")
    @click.argument("jid")
    @json_option
    @command_options
    def show(
        jid: str, as_json: bool, config_file: str | None, redis_url: str | None, debug: bool
    ) -> None:
        """Everything about the entry of JID: fields, backtrace, the payload as stored."""
        with target(config_file, redis_url) as t:
            entry = kind.open(t).find(jid)
        if entry is None:
            raise NotFound(f"no entry {jid!r} in {kind.title}")
        if as_json:
            echo_json(entry_json(entry))
        else:
            echo(describe(entry, kind))

    return show


# What retry or delete does to the selected entries of one set; the line to print.
SelectionAction = Callable[[SetKind, JobSet, str | None, str | None, str | None], str]


def selection_command(name: str, help_text: str, action: SelectionAction) -> Callable[..., Any]:
    """A factory of ``NAME JID | --job NAME | --error CLASS | --all`` commands:
    retry and delete differ only in what they do to the entries selected."""

    def make(kind: SetKind) -> click.Command:
        @click.command(name=name, help=help_text)
        @selector_options
        @command_options
        def command(
            jid: str | None,
            job: str | None,
            error: str | None,
            everyone: bool,
            config_file: str | None,
            redis_url: str | None,
            debug: bool,
        ) -> None:
            check_selector(jid, job, error, everyone)
            with target(config_file, redis_url) as t:
                line = action(kind, kind.open(t), jid, job, error)
            echo(line)

        return command

    return make


def retry_selected(
    kind: SetKind, jobs: JobSet, jid: str | None, job: str | None, error: str | None
) -> str:
    if jid is not None:
        if not jobs.retry(jid):  # NotRunnable: one line, exit 1
            raise NotFound(f"no entry {jid!r} in {kind.title}")
        return f"moved 1 entry of {kind.title} to its queue"
    moved = left = 0
    for entry in list(jobs.filter(job, error)):
        if entry.runnable:
            moved += jobs.retry(entry)
        else:
            left += 1
    line = f"moved {plural(moved, 'entry', 'entries')} of {kind.title} to their queues"
    if left:
        line += f"; {left} not runnable left in place (delete them)"
    return line


def by_jid_or_filter(
    kind: SetKind,
    one: Callable[[str], bool],
    where: Callable[[str | None, str | None], int],
    jid: str | None,
    job: str | None,
    error: str | None,
) -> int:
    """``one(jid)`` (an error if the entry is gone) or ``where(job, error)``;
    how many entries it acted on."""
    if jid is None:
        return where(job, error)
    if not one(jid):
        raise NotFound(f"no entry {jid!r} in {kind.title}")
    return 1


def delete_selected(
    kind: SetKind, jobs: JobSet, jid: str | None, job: str | None, error: str | None
) -> str:
    deleted = by_jid_or_filter(kind, jobs.delete, jobs.delete_where, jid, job, error)
    return f"deleted {plural(deleted, 'entry', 'entries')} of {kind.title}"


def kill_selected(
    kind: SetKind, jobs: JobSet, jid: str | None, job: str | None, error: str | None
) -> str:
    if not isinstance(jobs, KillableSet):  # not offered for the dead set
        raise JobmasterError(f"{kind.title} has no kill")
    killed = by_jid_or_filter(kind, jobs.kill, jobs.kill_where, jid, job, error)
    return f"moved {plural(killed, 'entry', 'entries')} of {kind.title} to the dead set"


retry_command = selection_command(
    "retry", "Move the selected entries to the end of their queues, to run now.", retry_selected
)
delete_command = selection_command(
    "delete", "Delete the selected entries (their jobs will not run).", delete_selected
)
kill_command = selection_command(
    "kill",
    "Move the selected entries to the dead set now: they will not run unless retried "
    "from there. A batch counts the death and a chain stops, as if the job had died.",
    kill_selected,
)


def clear_command(kind: SetKind) -> click.Command:
    """``clear``: every entry, after confirmation."""

    @click.command(name="clear")
    @yes_option
    @command_options
    def clear(yes: bool, config_file: str | None, redis_url: str | None, debug: bool) -> None:
        """Delete every entry (asks first unless --yes)."""
        with target(config_file, redis_url) as t:
            jobs = kind.open(t)
            size = jobs.size()
            if not size:
                echo(f"{kind.title} is already empty")
                return
            confirm(f"Delete all {plural(size, 'entry', 'entries')} of {kind.title}?", yes)
            deleted = jobs.clear()
        echo(f"deleted {plural(deleted, 'entry', 'entries')} of {kind.title}")

    return clear


def set_group(kind: SetKind) -> click.Group:
    """The group of one set: its commands, each closed over ``kind``."""
    makers = [list_command, show_command, retry_command, delete_command]
    if issubclass(kind.api, KillableSet):
        makers.append(kill_command)
    makers.append(clear_command)
    commands = [make(kind) for make in makers]
    names = ", ".join(command.name or "" for command in commands)
    group = SharedOptionsGroup(name=kind.command, help=f"{kind.help} Commands: {names}.")
    for command in commands:
        group.add_command(command)
    return group


def describe(entry: SortedEntry, kind: SetKind) -> str:
    """``show``: the fields people look for first, then the entry whole."""
    now = time.time()
    payload = entry.payload or {}
    fields = [
        ("jid", entry.jid or "-"),
        ("job", entry.job or "-"),
        ("queue", entry.queue or "-"),
        (kind.when.lower(), timestamp(entry.at, now)),
        ("enqueued", timestamp(entry.enqueued_at, now)),
        ("retries", str(entry.retries)),
        ("error", error_text(entry) or "-"),
    ]
    if entry.dead_reason and entry.dead_reason != entry.error_message:
        fields.append(("reason", entry.dead_reason))
    fields.append(("runnable", "yes" if entry.runnable else "no (delete it: it cannot be retried)"))
    if isinstance(payload.get("raw"), str):  # a garbage payload, buried with its raw text
        fields.append(("raw", payload["raw"]))
    lines = [f"{name + ':':<10}{one_line(value)}" for name, value in fields]
    stored = json.dumps(entry.payload, indent=2, sort_keys=True) if entry.payload else entry.text
    return "\n".join([*lines, "entry:", stored])


GROUPS = [set_group(kind) for kind in KINDS]
