"""The orphan scan against heartbeats and members that nobody of ours wrote."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from jobmaster import liveness
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.identity import Identity
from jobmaster.keys import Keys
from jobmaster.orphans import recover_orphans
from jobmaster.worker.context import WorkerContext

K = Keys()


@pytest.mark.skipif(not liveness.locus(), reason="needs Linux's /proc")
def test_a_forged_heartbeat_is_passed_over_and_the_others_are_recovered(
    make_config: Callable[..., Config],
    client: Client,
    store: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A heartbeat of this machine whose pid overflowed kill() stopped every
    master of the host from starting (the scan ran before the first fork)."""
    forged = "forged:1:deadbeef"
    store.sadd(K.processes, forged, "lost:2:cafebabe")
    store.hset(
        K.heartbeat(forged),
        mapping={"identity": forged, "locus": liveness.locus(), "pid": "9" * 30},
    )
    jid = client.push({"job": "tests.record", "args": ["orphan"]})
    store.lmove(K.queue("default"), K.inprogress("lost:2:cafebabe"), "RIGHT", "LEFT")

    def judge_badly(heartbeat: object) -> bool:
        # What judging such a heartbeat did (liveness now parses it safely:
        # tests/unit/test_liveness.py); any other surprise must be contained too.
        raise OverflowError("Python int too large to convert to C int")

    monkeypatch.setattr(liveness, "provably_dead", judge_badly)
    ctx = WorkerContext.create(make_config(), Identity())
    ctx.recovery.silent_grace = 0.0  # the fence is tested apart (test_orphan_scan.py)
    reports = recover_orphans(ctx.recovery, ctx.name)  # no exception escapes
    assert reports["lost:2:cafebabe"].requeued == [jid]
    assert forged not in reports
