"""``jobmaster batches list|show BID|cancel BID``: the batches as an operator sees them."""

from __future__ import annotations

import time

import click

from jobmaster.api import BatchInfo, BatchSet
from jobmaster.commands.common import command_options, confirm, json_option, target, yes_option
from jobmaster.commands.options import SharedOptionsGroup
from jobmaster.commands.output import clip, echo, echo_json, relative, table, timestamp
from jobmaster.errors import NotFound


def batch_table(batches: list[BatchInfo], now: float) -> str:
    if not batches:
        return "no batches (kept 30 days after their last jobs were added)"
    rows = [
        (
            b.bid,
            b.state,
            f"{b.progress:.0%}",
            b.total,
            b.pending,
            b.failed,
            b.dead,
            b.skipped,
            relative(b.created_at, now),
            clip(b.description, 40),
        )
        for b in batches
    ]
    headers = ("BID", "STATE", "DONE", "TOTAL", "PENDING", "FAILED", "DEAD", "SKIPPED")
    return table((*headers, "CREATED", "DESCRIPTION"), rows, right=(2, 3, 4, 5, 6, 7))


def found(batches: BatchSet, bid: str) -> BatchInfo:
    info = batches.get(bid)
    if info is None:
        raise NotFound(f"no batch {bid} (unknown, or expired after 30 days)")
    return info


@click.group(name="batches", cls=SharedOptionsGroup)
def batches_group() -> None:
    """List batches, show one's counters, cancel one."""


@batches_group.command(name="list")
@json_option
@command_options
def batches_list(
    as_json: bool, config_file: str | None, redis_url: str | None, debug: bool
) -> None:
    """Every batch kept, newest first: state, progress and counters."""
    with target(config_file, redis_url) as t:
        batches = BatchSet(t.client).list()
    if as_json:
        echo_json([b.as_dict() for b in batches])
    else:
        echo(batch_table(batches, time.time()))


@batches_group.command(name="show")
@click.argument("bid")
@json_option
@command_options
def batches_show(
    bid: str, as_json: bool, config_file: str | None, redis_url: str | None, debug: bool
) -> None:
    """One batch's counters, state and when its callbacks fired (exit 1 if unknown)."""
    with target(config_file, redis_url) as t:
        info = found(BatchSet(t.client), bid)
    if as_json:
        echo_json(info.as_dict())
        return
    now = time.time()
    lines = [
        ("batch", info.bid),
        ("description", info.description or "-"),
        ("state", info.state + (" (cancelled)" if info.cancelled and info.complete else "")),
        ("progress", f"{info.progress:.0%} of {info.total} job(s)"),
        ("pending", str(info.pending)),
        ("succeeded", str(info.succeeded)),
        ("failed", f"{info.failed} (failed and not succeeded since)"),
        ("dead", str(info.dead)),
        ("skipped", str(info.skipped)),
        ("created", timestamp(info.created_at, now)),
        ("complete", timestamp(info.complete_at, now)),
        ("success", timestamp(info.success_at, now)),
    ]
    for name, value in lines:
        echo(f"{name + ':':<13}{value}")


@batches_group.command(name="cancel")
@click.argument("bid")
@yes_option
@command_options
def batches_cancel(
    bid: str, yes: bool, config_file: str | None, redis_url: str | None, debug: bool
) -> None:
    """Skip the batch's jobs not yet started (counted as skipped, never run).

    Running jobs finish; on_complete still fires once every job has run or
    been skipped, on_success does not.
    """
    with target(config_file, redis_url) as t:
        batches = BatchSet(t.client)
        info = found(batches, bid)
        confirm(f"Cancel batch {bid} ({info.pending} job(s) pending)?", yes)
        batches.cancel(bid)
    echo(f"{bid}: cancelled; its jobs not yet started will be skipped")
