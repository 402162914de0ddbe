"""``jobmaster batches list|show|cancel`` against a real Redis, in process."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

import jobmaster
from jobmaster import exitcodes
from jobmaster.cli import main
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import wait_until

Invoke = Callable[..., Result]


@pytest.fixture
def cli(redis_url: str) -> Invoke:
    def invoke(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(main, [*args, "--redis-url", redis_url], input=input)

    return invoke


def test_list_show_and_cancel_a_batch(cli: Invoke, client: Client) -> None:
    assert cli("batches", "list").output.startswith("no batches")
    batch = jobmaster.batch(description="nightly import", client=client)
    batch.add(*[jobs.member.s(n) for n in range(3)])

    listed = cli("batches", "list")
    assert listed.exit_code == 0, listed.output
    header, row = listed.output.splitlines()
    assert header.split()[:4] == ["BID", "STATE", "DONE", "TOTAL"]
    assert row.split()[:5] == [batch.bid, "running", "0%", "3", "3"]
    assert "nightly import" in row
    [data] = json.loads(cli("batches", "list", "--json").output)
    assert (data["bid"], data["total"], data["pending"], data["state"]) == (
        batch.bid,
        3,
        3,
        "running",
    )

    shown = cli("batches", "show", batch.bid)
    assert shown.exit_code == 0 and "progress:    0% of 3 job(s)" in shown.output
    assert json.loads(cli("batches", "show", batch.bid, "--json").output)["description"] == (
        "nightly import"
    )

    refused = cli("batches", "cancel", batch.bid, input="n\n")
    assert refused.exit_code == 1 and not jobmaster.batch_status(batch.bid, client)["cancelled"]  # type: ignore[index]
    cancelled = cli("batches", "cancel", batch.bid, "--yes")
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.output
    assert jobmaster.batch_status(batch.bid, client)["cancelled"]  # type: ignore[index]


def test_an_unknown_batch_is_one_line_and_exit_6(cli: Invoke) -> None:
    for command in (["show"], ["cancel", "--yes"]):
        result = cli("batches", *command, "0123456789abcdef01234567")
        assert result.exit_code == exitcodes.NOT_FOUND
        assert result.output.strip().endswith(
            "no batch 0123456789abcdef01234567 (unknown, or expired after 30 days)"
        )
        assert "Traceback" not in result.output


def test_a_finished_batch_shows_success_and_when(
    cli: Invoke,
    client: Client,
    make_config: Callable[..., Config],
    running_worker: Callable[[Config], WorkerProcess],
) -> None:
    batch = jobmaster.batch(client=client)
    batch.add(jobs.member.s(1), jobs.member.s(2))
    running_worker(make_config())
    wait_until(lambda: (jobmaster.batch_status(batch.bid, client) or {}).get("success"), 10)
    shown = cli("batches", "show", batch.bid).output
    assert "state:       success" in shown and "progress:    100% of 2 job(s)" in shown
    assert "success:     20" in shown  # a local time stamp
