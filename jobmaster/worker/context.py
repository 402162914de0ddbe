"""What every part of one worker process shares: Redis, keys, scripts, settings."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property

import redis

from jobmaster.config import Config
from jobmaster.connection import connect
from jobmaster.deadset import DeadSetLimits
from jobmaster.identity import Identity
from jobmaster.keys import Keys
from jobmaster.recovery import Recovery
from jobmaster.redis_target import RedisTarget
from jobmaster.scripts import Scripts
from jobmaster.worker.core import IOCore, Marking

DAY_COUNTER_TTL = 5 * 365 * 24 * 3600  # per-day counters kept five years for graphs

# The threads of a worker process that may each hold a connection of its pool
# at the same moment, besides the ``concurrency`` processor threads.
BACKGROUND_THREADS = {
    "main": 1,  # start, stop, pushing jobs back
    "heartbeat": 1,
    "orphan scan": 1,  # its own thread: never in the heartbeat's (worker/orphan_scan.py)
    "scheduled poller": 1,
    "self-check": 1,
    "wakeup listener": 1,  # holds its pub/sub connection for as long as it is subscribed
    "watchdog": 1,  # records the outcome of a job stuck past its timeout
    "cancel requests": 2,  # its pub/sub connection, and its fallback read (cancels.py)
    "I/O core": 1,  # fetches, acknowledgements and "working" marks (core.py)
}
POOL_MARGIN = 2  # middleware or hooks that use the worker's client from threads of their own


def pool_size(concurrency: int) -> int:
    """``max_connections`` of a worker process's pool.

    redis-py's pool does not wait for a free connection: past the cap it
    raises ConnectionError("Too many connections"). So the cap covers every
    thread that talks to Redis at once; and there is a cap, so that a leak
    cannot open connections until Redis's ``maxclients`` refuses everyone.
    """
    return concurrency + sum(BACKGROUND_THREADS.values()) + POOL_MARGIN


@dataclass
class WorkerContext:
    """Built once per process (after fork, in a child), handed to each component."""

    config: Config
    identity: Identity
    redis: redis.Redis
    keys: Keys
    scripts: Scripts
    stopping: threading.Event = field(default_factory=threading.Event)
    # Made here, not lazily: the processor threads share one, from their start.
    core: IOCore = field(init=False)

    def __post_init__(self) -> None:
        marking = None
        if self.status_ttl:
            horizon = max(1, round(self.config.heartbeat_ttl))
            marking = Marking(self.scripts.mark, self.inprogress_key, self.status_ttl, horizon)
        finishes = (self.scripts.finish, self.scripts.finish_many)
        self.core = IOCore(self.redis, marking, finishes)

    @classmethod
    def create(cls, config: Config, identity: Identity | None = None) -> WorkerContext:
        """Fresh connections sized for the processor threads plus the background loops."""
        client = connect(
            RedisTarget.of(config),
            max_connections=pool_size(config.concurrency),
            retry_commands=False,
        )
        return cls(
            config=config,
            identity=identity or Identity(),
            redis=client,
            keys=Keys(config.namespace),
            scripts=Scripts(client),
        )

    # Cached: read for every job on the hot path, and fixed for the process's life.
    @cached_property
    def name(self) -> str:
        """The identity as a string: names the in-progress list and heartbeat."""
        return str(self.identity)

    @property
    def status_ttl(self) -> int:
        """Seconds job statuses are kept; 0 when status tracking is off."""
        return round(self.config.status_ttl) if self.config.track_status else 0

    @cached_property
    def dead_limits(self) -> DeadSetLimits:
        return DeadSetLimits(self.config.dead_max_jobs, self.config.dead_max_days)

    @cached_property
    def recovery(self) -> Recovery:
        # The orphan scan's fence (recovery.py): a missing heartbeat is believed
        # after half a TTL, more than the owner's beat interval.
        grace = self.config.heartbeat_ttl / 2
        return Recovery(
            self.redis, self.keys, self.scripts, self.dead_limits, self.status_ttl, grace
        )

    @cached_property
    def inprogress_key(self) -> str:
        return self.keys.inprogress(self.name)
