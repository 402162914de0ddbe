"""Signatures and what a step's outcome does to its chain, without Redis."""

from __future__ import annotations

import json

import pytest

import jobmaster
from jobmaster.workflows.chain import link
from jobmaster.workflows.signature import Signature
from jobmaster.workflows.steps import follow_up, step_of
from tests import jobs


def test_a_signature_is_json_and_comes_back_the_same() -> None:
    sig = jobs.step.options(queue="critical").s("a", fail=True)
    data = json.loads(json.dumps(sig.to_json()))
    assert data == {
        "job": "tests.step",
        "args": ["a"],
        "kwargs": {"fail": True},
        "queue": "critical",
        "retry": 0,
    }
    assert Signature.from_json(data) == sig
    payload = sig.payload({"batch": "b1"})
    assert (payload["job"], payload["queue"], payload["retry"], payload["batch"]) == (
        "tests.step",
        "critical",
        0,
        "b1",
    )


def test_a_signature_refuses_what_cannot_be_json_or_enqueued_later() -> None:
    with pytest.raises(TypeError, match="argument 0"):
        jobs.step.s(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unique"):
        jobs.unique_exec.s("x")
    with pytest.raises(ValueError, match="encrypted"):
        jobs.encrypted.s("x", card="1")
    with pytest.raises(TypeError, match="no option"):
        Signature("tests.step", options={"unique": "until_executed"})
    with pytest.raises(TypeError, match="signature"):
        jobmaster.chain(jobs.step.s("a"), "tests.step")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="at least one"):
        jobmaster.chain()


def chain_field(rest: list[Signature], on_failure: Signature | None = None) -> dict[str, object]:
    failure = on_failure.to_json() if on_failure else None
    return link("c1", 1, len(rest) + 1, [sig.to_json() for sig in rest], failure)


def test_a_success_pushes_the_next_step_carrying_the_rest() -> None:
    field = chain_field([jobs.step.s("b"), jobs.step.s("c")], jobs.callback.s("failed"))
    follow = follow_up("done", field, now=100.0)
    assert (follow.event, follow.queue) == ("next", "default")
    nxt = json.loads(follow.payload)
    assert (nxt["args"], nxt["jid"], nxt["enqueued_at"]) == (["b"], follow.jid, 100.0)
    assert nxt["chain"]["step"] == 2 and nxt["chain"]["steps"] == 3
    assert [s["args"] for s in nxt["chain"]["rest"]] == [["c"]]
    assert nxt["chain"]["on_failure"]["job"] == "tests.callback"


def test_a_step_s_trace_context_travels_to_the_next_step_and_to_on_failure() -> None:
    """payload.CARRIED: a chain stays one trace (contrib/otel.py writes the field)."""
    trace = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    field = chain_field([jobs.step.s("b")], jobs.callback.s("failed"))
    step = step_of({"jid": "j1", "job": "tests.step", "chain": field, "trace_context": trace})
    assert step is not None and step.carried == {"trace_context": trace}
    nxt = json.loads(follow_up("done", field, 1.0, step.carried).payload)
    assert nxt["trace_context"] == trace
    callback = json.loads(follow_up("dead", field, 1.0, step.carried).payload)
    assert callback["trace_context"] == trace
    assert "trace_context" not in json.loads(follow_up("done", field, 1.0).payload)


def test_the_last_success_ends_the_chain_and_a_failure_for_good_stops_it() -> None:
    assert follow_up("done", chain_field([]), 1.0).event == "last"
    failed = follow_up("dead", chain_field([jobs.step.s("b")], jobs.callback.s("x")), 1.0)
    callback = json.loads(failed.payload)
    assert failed.event == "failed"
    assert (callback["job"], callback["kwargs"]) == ("tests.callback", {"chain_id": "c1"})
    assert follow_up("dropped", chain_field([jobs.step.s("b")]), 1.0).event == "failed"
    assert follow_up("dropped", chain_field([jobs.step.s("b")]), 1.0).payload == b""
    # A retry is not a failure yet; a deferred job did not run.
    assert follow_up("retry", chain_field([jobs.step.s("b")]), 1.0).event == ""
    assert follow_up("deferred", chain_field([jobs.step.s("b")]), 1.0).event == ""


def test_an_unreadable_next_step_stops_the_chain_instead_of_raising() -> None:
    field = link("c1", 1, 2, [{"job": 42}], jobs.callback.s("f").to_json())
    follow = follow_up("done", field, 1.0)
    assert follow.event == "failed" and json.loads(follow.payload)["job"] == "tests.callback"


def test_step_of_reads_the_workflow_fields_and_ignores_malformed_ones() -> None:
    assert step_of({"jid": "j"}) is None
    assert step_of({"batch": "b1"}) is not None and step_of({"batch": "b1"}).batch == "b1"  # type: ignore[union-attr]
    assert step_of({"batch": 7, "chain": "nope"}) is None
    assert step_of({"batch": "\ud800"}) is None  # no UTF-8 form: never a key name
    assert step_of({"chain": {"id": "c"}}).chain == {"id": "c"}  # type: ignore[union-attr]
