"""Building a master: its collaborators made here, handed to ``Master``.

The master's loop only supervises (master.py); what it works with is made
once, before it runs, in the order each needs the other: the Redis client
and everything that talks to Redis go to the Redis thread (duties.py),
never to the loop; the child table is shared by the loop, the stopper, the
memory policy and the metrics hub. Tests build ``Master`` from fakes the
same way, through its constructor.
"""

from __future__ import annotations

import redis

from jobmaster.config import Config
from jobmaster.connection import connect
from jobmaster.deadset import DeadSetLimits
from jobmaster.embedded import EmbeddedRedis
from jobmaster.identity import Identity
from jobmaster.keys import Keys
from jobmaster.metrics.hub import MetricsHub
from jobmaster.periodic import PeriodicTicker
from jobmaster.recovery import Recovery
from jobmaster.redis_target import RedisTarget
from jobmaster.scripts import Scripts
from jobmaster.signals import MASTER_SIGNALS, SignalQueue
from jobmaster.supervisor.children import ChildTable
from jobmaster.supervisor.duties import RedisDuties
from jobmaster.supervisor.history import HistoryRecorder
from jobmaster.supervisor.master import Master
from jobmaster.supervisor.memory_policy import MemoryPolicy
from jobmaster.supervisor.sdnotify import Notifier
from jobmaster.supervisor.stopping import Stopper


def build_master(config: Config, embedded: EmbeddedRedis | None = None) -> Master:
    client = connect(RedisTarget.of(config), retry_commands=False)
    children = ChildTable(wanted=config.processes)
    stopper = Stopper(config, children)
    memory = MemoryPolicy.build(config, children, stopper)
    metrics = None
    if config.metrics_port:
        metrics = MetricsHub(config, children, lambda: children.wanted, client)
    identity = str(Identity())
    return Master(
        config=config,
        identity=identity,
        children=children,
        stopper=stopper,
        memory=memory,
        duties=build_duties(config, client, identity, metrics, memory.watch.limit_mb),
        signals=SignalQueue(MASTER_SIGNALS, wakeup=True),
        notifier=Notifier(),
        metrics=metrics,
        embedded=embedded,
    )


def build_duties(
    config: Config,
    client: redis.Redis,
    identity: str,
    metrics: MetricsHub | None,
    max_child_mb: float,
) -> RedisDuties:
    """The Redis thread and what it runs: recovery, periodic jobs, history."""
    keys = Keys(config.namespace)
    limits = DeadSetLimits(config.dead_max_jobs, config.dead_max_days)
    status_ttl = round(config.status_ttl) if config.track_status else 0
    # Its start-up scan (recover_left_behind) is fenced like the children's
    # (recovery.py): a heartbeat deleted as this master starts is not believed.
    grace = config.heartbeat_ttl / 2
    recovery = Recovery(client, keys, Scripts(client), limits, status_ttl, grace)
    ticker = PeriodicTicker(client, keys, config.periodic.values(), status_ttl=status_ttl)
    return RedisDuties(
        config=config,
        client=client,
        keys=keys,
        identity=identity,
        recovery=recovery,
        ticker=ticker,
        history=HistoryRecorder(client, keys),  # the dashboard's chart
        queue_watch=metrics.queue_watch if metrics is not None else None,
        max_child_mb=max_child_mb,
    )
