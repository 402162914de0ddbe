"""``result_ttl``: a job option, checked when set, carried in the payload."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest

import jobmaster
from jobmaster.job import JobOptions


class RecordingClient:
    """Stands in for the default client: remembers the payloads it would push."""

    def __init__(self) -> None:
        self.pushed: list[dict[str, Any]] = []

    def push_payloads(
        self, payloads: list[dict[str, Any]], at: float | None = None
    ) -> list[dict[str, Any]]:
        self.pushed.extend(payloads)
        return payloads


@pytest.mark.parametrize("bad", [0, 0.5, -3, True, "60", math.inf, math.nan])
def test_result_ttl_must_be_seconds_of_at_least_one(bad: object) -> None:
    with pytest.raises(ValueError, match="result_ttl must be seconds >= 1"):
        JobOptions(result_ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="result_ttl must be seconds >= 1"):
        jobmaster.job(name=f"tests.unit.{uuid.uuid4().hex}", result_ttl=bad)  # type: ignore[arg-type]


def test_result_ttl_travels_in_the_payload_from_the_decorator_and_options() -> None:
    assert "result_ttl" not in JobOptions().payload_fields()
    recorder = RecordingClient()

    @jobmaster.job(name=f"tests.unit.{uuid.uuid4().hex}", result_ttl=60)
    def compute(x: int) -> int:
        return x * 2

    compute.client = recorder  # type: ignore[assignment]
    compute.enqueue(1)
    compute.options(result_ttl=3600.5).enqueue(2)
    compute.options(queue="other").enqueue(3)
    assert [p["result_ttl"] for p in recorder.pushed] == [60, 3600.5, 60]
    assert compute.s(4).options["result_ttl"] == 60
