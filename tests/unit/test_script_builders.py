"""Each script builder puts every named field at the KEYS/ARGV index its Lua reads.

The tables below restate the KEYS/ARGV comments of scripts.py, index by
index (1-based, as in Lua). A field moved in a builder without the Lua (or
the Lua changed without the builder) fails here; so does a field added to a
builder and pinned nowhere, and a builder added without a table.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from jobmaster import scripts as S

Pins = dict[str, int]  # field -> 1-based index


def named(cls: type[Any], **given: Any) -> Any:
    """``cls`` with each field not ``given`` set to a value that names it."""
    values = {f.name: f"<{f.name}>" for f in dataclasses.fields(cls)}
    return cls(**{**values, **given})


def check(call: Any, keys: Pins, argv: Pins, *, elsewhere: tuple[str, ...] = ()) -> None:
    """Every field of ``call`` is pinned (or checked ``elsewhere``), each at its index."""
    fields = {f.name for f in dataclasses.fields(call)}
    assert fields == set(keys) | set(argv) | set(elsewhere)
    for name, index in keys.items():
        assert call.keys()[index - 1] == getattr(call, name), f"KEYS[{index}] {name}"
    for name, index in argv.items():
        assert call.argv()[index - 1] == getattr(call, name), f"ARGV[{index}] {name}"


TRANSFER_KEYS = {"source_key": 1, "target_key": 2, "queues_key": 3, "status_key": 4}
TRANSFER_ARGV = {
    "source_kind": 1,
    "entry": 2,
    "stored": 3,
    "target_kind": 4,
    "score": 5,
    "queue": 6,
    "wakeup_channel": 7,
    "cap": 8,
    "cutoff": 9,
    "status": 10,
    "status_ttl": 11,
}
FINISH_KEYS = {
    "inprogress_key": 1,
    "processed_key": 2,
    "processed_day_key": 3,
    "failed_key": 4,
    "failed_day_key": 5,
    "target_key": 6,
    "status_key": 7,
    "attempts_key": 8,
    "lock_key": 9,
    "result_key": 10,
    "waiter_key": 11,
}
FINISH_ARGV = {
    "payload": 1,
    "failed": 2,
    "day_ttl": 3,
    "target_kind": 4,
    "stored": 5,
    "score": 6,
    "dead_cap": 7,
    "dead_cutoff": 8,
    "status": 9,
    "attempt": 10,
    "status_ttl": 11,
    "lock_action": 12,
    "jid": 13,
    "lock_ttl": 14,
    "result": 15,
    "ended_channel": 16,
}
# ``k`` and ``a`` of workflow_step (WORKFLOW_FUNCTION), 1-based.
STEP_KEYS = {
    "queues_key": 1,
    "batch_key": 2,
    "batch_failed_key": 3,
    "chain_key": 4,
    "follow_queue_key": 5,
    "follow_status_key": 6,
    "scheduled_key": 13,
    "dead_key": 14,
}
STEP_ARGV = {
    "queue_prefix": 1,
    "wakeup_prefix": 2,
    "status_prefix": 3,
    "batch_event": 4,
    "now": 5,
    "chain_event": 6,
    "follow_queue": 7,
    "follow_jid": 8,
    "follow_payload": 9,
    "failed_ttl": 10,
}
CALLBACKS = S.CallbackTargets(("<cq>", "<cs>"), ("<sq>", "<ss>"), ("<dq>", "<ds>"))
CALLBACK_KEYS = ["<cq>", "<cs>", "<sq>", "<ss>", "<dq>", "<ds>"]


def workflow_step() -> Any:
    return named(S.WorkflowStep, callbacks=CALLBACKS)


def test_push() -> None:
    call = named(S.Push, payloads=[b"p1", b"p2"], status_keys=["s1", "s2"])
    check(
        call,
        {"queue_key": 1, "queues_key": 2},
        {"queue": 1, "wakeup_channel": 2, "status_ttl": 3},
        elsewhere=("payloads", "status_keys"),
    )
    assert call.keys()[2:] == ["s1", "s2"]  # KEYS[3..]
    assert call.argv()[3:] == [b"p1", b"p2"]  # ARGV[4..]
    assert named(S.Push, payloads=[b"p"], status_keys=()).keys()[2:] == []  # status off


def test_fetch() -> None:
    call = named(S.Fetch, queues=[("a", "qa"), ("b", "qb")])
    check(call, {"inprogress_key": 1, "paused_key": 2}, {"most": 1}, elsewhere=("queues",))
    assert call.keys()[2:] == ["qa", "qb"]  # KEYS[3..]
    assert call.argv()[1:] == ["a", "b"]  # ARGV[2..], in the order of KEYS[3..]


def test_give_back() -> None:
    call = named(S.GiveBack, jobs=[(b"p1", "a", "qa"), (b"p2", "b", "qb"), (b"p3", "a", "qa")])
    check(call, {"inprogress_key": 1}, {"wakeup_prefix": 1}, elsewhere=("jobs",))
    assert call.keys()[1:] == ["qa", "qb", "qa"]  # KEYS[2..], one per job
    # Triples in the order of KEYS[2..]: payload, queue name, jobs given back there.
    assert call.argv()[1:] == [b"p1", "a", 2, b"p2", "b", 1, b"p3", "a", 2]


def test_mark() -> None:
    call = named(S.Mark, marks=[("s1", b"p1", 100), ("s2", b"p2", 200)])
    check(call, {"inprogress_key": 1}, {}, elsewhere=("marks",))
    assert call.keys() == ["<inprogress_key>", "s1", "s2"]
    assert call.argv() == [b"p1", 100, b"p2", 200]  # pairs in the order of KEYS[2..]


def test_finish() -> None:
    call = named(S.Finish)
    check(call, FINISH_KEYS, FINISH_ARGV)
    assert len(call.argv()) == 16


def test_finish_many_is_each_finish_in_turn() -> None:
    first, second = named(S.Finish, jid="a"), named(S.Finish, jid="b")
    call = S.FinishMany(finishes=[(first.keys(), first.argv()), (second.keys(), second.argv())])
    assert call.keys() == [*first.keys(), *second.keys()]
    assert call.argv() == [*first.argv(), *second.argv()]
    # The stride FINISH_MANY's Lua reads each job's share with.
    assert (len(first.keys()), len(first.argv())) == (S.FINISH_KEYS, S.FINISH_ARGS)


def test_workflow_step_is_k_and_a() -> None:
    step = workflow_step()
    check(step, STEP_KEYS, STEP_ARGV, elsewhere=("callbacks",))
    assert step.keys()[6:12] == CALLBACK_KEYS  # k[7..12]
    assert len(step.keys()) == 14 and len(step.argv()) == 10


def test_callback_targets() -> None:
    assert CALLBACKS.keys() == CALLBACK_KEYS  # complete, success, death; queue then status


def test_finish_step_appends_the_step_to_finish() -> None:
    finish, step = named(S.Finish), workflow_step()
    call = S.FinishStep(finish, step)
    # FINISH_STEP counts the step from the end: the last 14 KEYS, the last 10 ARGV.
    assert call.keys() == [*finish.keys(), *step.keys()]
    assert call.argv() == [*finish.argv(), *step.argv()]
    assert call.keys()[-14:] == step.keys() and call.argv()[-10:] == step.argv()
    assert call.argv()[:16] == finish.argv()  # the result and the channel always given


def bury() -> Any:
    return named(S.Bury, transfer=named(S.Transfer))


def test_transfer() -> None:
    check(named(S.Transfer), TRANSFER_KEYS, TRANSFER_ARGV)


def test_bury_is_transfer_then_its_tail() -> None:
    call = bury()
    check(
        call,
        {"lock_key": 5, "hook_queue_key": 6},
        {
            "unlock_jid": 12,
            "hook_payload": 13,
            "hook_queue": 14,
            "hook_channel": 15,
            "ended_channel": 16,
        },
        elsewhere=("transfer",),
    )
    assert call.keys()[:4] == call.transfer.keys() and call.argv()[:11] == call.transfer.argv()


def test_bury_step() -> None:
    step = workflow_step()
    call = S.BuryStep(bury(), step, "<jid>")
    assert call.keys()[:6] == call.bury.keys() and call.argv()[:16] == call.bury.argv()
    assert call.keys()[6:20] == step.keys()  # KEYS[7..20]
    assert call.argv()[16:26] == step.argv()  # ARGV[17..26]
    assert call.argv()[26] == "<jid>" and len(call.argv()) == 27  # ARGV[27]


def test_batch_add() -> None:
    jobs = [
        S.BatchJob("q1", 0, "j1", b"p1", "qk1", "sk1"),
        S.BatchJob("q2", 9.5, "j2", b"p2", "qk2", "sk2"),
    ]
    call = named(S.BatchAdd, callbacks=CALLBACKS, fields={"a": "1", "b": "2"}, jobs=jobs)
    check(
        call,
        {"batch_key": 1, "failed_key": 2, "batches_key": 3, "queues_key": 4, "scheduled_key": 5},
        {
            "bid": 1,
            "now": 2,
            "batch_ttl": 3,
            "queue_prefix": 4,
            "wakeup_prefix": 5,
            "status_prefix": 6,
            "status_ttl": 7,
        },
        elsewhere=("callbacks", "fields", "jobs"),
    )
    assert call.keys()[5:11] == CALLBACK_KEYS  # KEYS[6..11]
    assert call.keys()[11:] == ["qk1", "sk1", "qk2", "sk2"]  # per job, in quadruple order
    assert call.argv()[7:12] == [2, "a", "1", "b", "2"]  # ARGV[8] n, ARGV[9..8+2n]
    assert call.argv()[12:] == ["q1", 0, "j1", b"p1", "q2", 9.5, "j2", b"p2"]


def test_periodic() -> None:
    slots = [S.PeriodicSlot("10", b"p1", "j1", "s1"), S.PeriodicSlot("20", b"p2", "j2", "s2")]
    call = named(S.Periodic, slots=slots)
    check(
        call,
        {"last_key": 1, "queue_key": 2, "queues_key": 3, "lock_key": 4},
        {"entry": 1, "queue": 2, "wakeup_channel": 3, "status_ttl": 4, "lock_ttl": 5},
        elsewhere=("slots",),
    )
    assert call.keys()[4:] == ["s1", "s2"]  # KEYS[5..], in triple order
    assert call.argv()[5:] == ["10", b"p1", "j1", "20", b"p2", "j2"]  # ARGV[6..]


def test_push_unique() -> None:
    check(
        named(S.PushUnique),
        {"lock_key": 1, "target_key": 2, "queues_key": 3, "status_key": 4},
        {
            "jid": 1,
            "lock_ttl": 2,
            "payload": 3,
            "target_kind": 4,
            "score": 5,
            "queue": 6,
            "wakeup_channel": 7,
            "status_ttl": 8,
        },
    )


def test_unlock() -> None:
    check(named(S.Unlock), {"lock_key": 1}, {"jid": 1, "action": 2, "ttl": 3})
    assert S.Unlock("k", "j").argv() == ["j", "release", 0]


def test_rate_count() -> None:
    check(named(S.RateCount), {"counter_key": 1}, {"ttl": 1})


def test_batch_cancel() -> None:
    check(named(S.BatchCancel), {"batch_key": 1}, {"now": 1})


def test_peek() -> None:
    call = named(S.Peek, by_score=True, rev=True)
    check(
        call,
        {"key": 1},
        {"low": 1, "high": 2, "count": 5, "keep": 6, "offset": 7},
        elsewhere=("by_score", "rev"),
    )
    assert call.argv()[2:4] == ["BYSCORE", "REV"]
    assert named(S.Peek, by_score=False, rev=False).argv()[2:4] == ["", ""]


def test_peek_list() -> None:
    check(named(S.PeekList), {"key": 1}, {"start": 1, "stop": 2, "keep": 3})


def test_pop_oldest() -> None:
    check(named(S.PopOldest), {"queue_key": 1}, {"most": 1, "keep": 2})


def test_expire_waiting() -> None:
    call = named(S.ExpireWaiting, status_keys=["a", "b"])
    check(call, {}, {"ttl": 1}, elsewhere=("status_keys",))
    assert call.keys() == ["a", "b"]


def test_control_pop() -> None:
    check(named(S.ControlPop), {"key": 1}, {"most": 1, "keep": 2})


def test_queue_ends() -> None:
    call = named(S.QueueEnds, queue_keys=["a", "b"])
    check(call, {}, {"keep": 1}, elsewhere=("queue_keys",))
    assert call.keys() == ["a", "b"]


def test_cancel_request() -> None:
    check(
        named(S.CancelRequest),
        {"status_key": 1, "cancels_key": 2, "cancelled_key": 3},
        {"jid": 1, "keep_for": 2, "most": 3, "future": 4, "channel": 5},
    )


def test_find_queued() -> None:
    check(named(S.FindQueued), {"queue_key": 1}, {"jid": 1, "start": 2, "size": 3, "keep": 4})


def test_cancel() -> None:
    check(
        named(S.Cancel),
        {"source_key": 1, "status_key": 2, "lock_key": 3},
        {
            "source_kind": 1,
            "entry": 2,
            "status": 3,
            "unlock_jid": 4,
            "status_ttl": 5,
            "ended_channel": 6,
        },
    )


def test_cancel_step() -> None:
    step = workflow_step()
    call = S.CancelStep(named(S.Cancel), step, "<jid>")
    assert call.keys()[:3] == call.cancel.keys() and call.argv()[:6] == call.cancel.argv()
    assert call.keys()[3:17] == step.keys()  # KEYS[4..17]
    assert call.argv()[6:16] == step.argv()  # ARGV[7..16]
    assert call.argv()[16] == "<jid>" and len(call.argv()) == 17  # ARGV[17]


def test_every_builder_has_a_test_here() -> None:
    builders = {cls.__name__ for cls in S.ScriptCall.__subclasses__()}
    tested = {
        "Push",
        "Fetch",
        "GiveBack",
        "Mark",
        "Finish",
        "FinishMany",
        "FinishStep",
        "BatchAdd",
        "Transfer",
        "Bury",
        "BuryStep",
        "Periodic",
        "PushUnique",
        "Unlock",
        "RateCount",
        "BatchCancel",
        "Peek",
        "PeekList",
        "PopOldest",
        "ExpireWaiting",
        "ControlPop",
        "QueueEnds",
        "CancelRequest",
        "FindQueued",
        "Cancel",
        "CancelStep",
        "JudgeOrphans",
    }
    assert builders == tested


def test_every_script_has_its_builder() -> None:
    """One builder per script Scripts registers (Finish for ``finish``, ...)."""

    class Registering:
        def register_script(self, script: str) -> str:
            return script

    registered = set(vars(S.Scripts(Registering())))  # type: ignore[arg-type]
    builders = {
        re.sub(r"(?<!^)([A-Z])", r"_\1", cls.__name__).lower()
        for cls in S.ScriptCall.__subclasses__()
    }
    assert registered == builders


def test_judge_orphans() -> None:
    call = S.JudgeOrphans(
        processes_key="<processes>",
        heartbeat_keys=["<hb1>", "<hb2>"],
        mark_keys=["<mark1>", "<mark2>"],
        inprogress_keys=["<list1>", "<list2>"],
        window_ms=4000,
        grace_ms=1000,
        identities=["a", "b"],
        fields=["identity", "pid"],
    )
    triples = ["<hb1>", "<mark1>", "<list1>", "<hb2>", "<mark2>", "<list2>"]
    assert call.keys() == ["<processes>", *triples]
    assert call.argv() == [4000, 1000, 2, "a", "b", "identity", "pid"]
