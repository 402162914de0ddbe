"""Every Redis key and channel name jobmaster uses, in one place.

All keys share one prefix, ``<namespace>:{<namespace>}:``. The braces are a
Redis Cluster hash tag: every key lands in the same slot, so each Lua script
may touch any of them and stays cluster-safe. Changing a name here changes
the wire contract with running workers and other-language producers: don't.
"""

from __future__ import annotations

import datetime


class Keys:
    """Names of the keys of one namespace."""

    def __init__(self, namespace: str = "jobmaster") -> None:
        self.namespace = namespace
        self.prefix = f"{namespace}:{{{namespace}}}:"

    # -- queues ---------------------------------------------------------
    def queue(self, name: str) -> str:
        """List of waiting payloads: producers LPUSH, workers take from the right."""
        return f"{self.prefix}queue:{name}"

    @property
    def queue_prefix(self) -> str:
        """What a script prepends to a queue name it reads from a stored callback."""
        return self.queue("")

    @property
    def queues(self) -> str:
        """Set of every queue name ever pushed to (for stats and the CLI)."""
        return f"{self.prefix}queues"

    @property
    def paused(self) -> str:
        """Set of paused queue names: fetch skips them."""
        return f"{self.prefix}paused"

    def wakeup_channel(self, queue: str) -> str:
        """Pub/sub channel told "N jobs arrived" so idle workers fetch at once."""
        return f"{self.prefix}wakeup:{queue}"

    @property
    def wakeup_prefix(self) -> str:
        """What a script prepends to a queue name to tell that queue's workers."""
        return self.wakeup_channel("")

    # -- in progress and processes --------------------------------------
    def inprogress(self, identity: str) -> str:
        """List of the payloads one worker process has fetched and not yet finished."""
        return f"{self.prefix}inprogress:{identity}"

    @property
    def processes(self) -> str:
        """Set of worker identities that may own an in-progress list."""
        return f"{self.prefix}processes"

    @property
    def masters(self) -> str:
        """Set of master identities (their heartbeats say which are alive)."""
        return f"{self.prefix}masters"

    def heartbeat(self, identity: str) -> str:
        """Hash of a live worker's info; it expires when the worker goes silent."""
        return f"{self.prefix}heartbeat:{identity}"

    @property
    def orphan_scan_lease(self) -> str:
        """Holds the identity of the one process that scans for orphans this
        interval (SET NX PX): without it every process of every host read every
        heartbeat each interval, N squared reads for N processes."""
        return f"{self.prefix}orphan-scan"

    def silent(self, identity: str) -> str:
        """Set by the orphan scan that first found ``identity``'s heartbeat
        missing; its age fences recovery (recovery.py)."""
        return f"{self.prefix}silent:{identity}"

    def control(self, identity: str) -> str:
        """List of remote commands (quiet, resume, stop) for one process."""
        return f"{self.prefix}control:{identity}"

    # -- sorted sets ----------------------------------------------------
    @property
    def scheduled(self) -> str:
        """Sorted set of payloads to enqueue later, scored by due unix time."""
        return f"{self.prefix}scheduled"

    @property
    def retry(self) -> str:
        """Sorted set of failed payloads waiting out their backoff."""
        return f"{self.prefix}retry"

    @property
    def dead(self) -> str:
        """Sorted set of payloads that will not run again, scored by death time."""
        return f"{self.prefix}dead"

    # -- per job ----------------------------------------------------------
    def status(self, jid: str) -> str:
        """A job's status (queued, scheduled, working, retrying, complete, failed,
        dead, cancelled), kept status_ttl seconds after its last change."""
        return f"{self.prefix}status:{jid}"

    @property
    def status_prefix(self) -> str:
        """What FETCH prepends to a jid it reads from a payload (same hash tag)."""
        return f"{self.prefix}status:"

    def result(self, jid: str) -> str:
        """A complete job's return value (JSON text), written with its final status
        and expiring with it; absent when the job returned None (results.py)."""
        return f"{self.prefix}result:{jid}"

    def result_waiter(self, jid: str) -> str:
        """Set (with a TTL) while a ``jobmaster.result(jid, wait=...)`` waits: only
        then does the job's end publish on ``ended_channel`` (results.py)."""
        return f"{self.prefix}waiting:{jid}"

    def ended_channel(self, jid: str) -> str:
        """Pub/sub channel told once a job ends (complete, dead, failed...): what a
        ``jobmaster.result(jid, wait=...)`` waits on instead of polling its status."""
        return f"{self.prefix}ended:{jid}"

    def unique(self, digest: str) -> str:
        """A unique job's lock: holds the jid that owns it, always with a TTL."""
        return f"{self.prefix}unique:{digest}"

    def overlap(self, name: str) -> str:
        """A WithoutOverlapping middleware's lock: holds the jid running under it."""
        return f"{self.prefix}overlap:{name}"

    def rate_window(self, name: str, window: int) -> str:
        """A RateLimit middleware's counter for one fixed window (expires with it)."""
        return f"{self.prefix}ratelimit:{name}:{window}"

    def attempts(self, jid: str) -> str:
        """List of a job's attempts (JSON), expiring with its status."""
        return f"{self.prefix}attempts:{jid}"

    @property
    def cancels(self) -> str:
        """Sorted set of jids ``jobmaster.cancel`` was asked to stop, scored by
        when (Redis's clock): every worker process reads what is new in it
        once a second (the fallback for a lost ``cancel_channel`` message),
        so a cancel reaches a job running on any host (api/cancels.py,
        worker/cancels.py)."""
        return f"{self.prefix}cancels"

    @property
    def cancel_channel(self) -> str:
        """Pub/sub channel told the jid of each cancel request as it is made:
        every worker process subscribes, so a running job stops at once."""
        return f"{self.prefix}cancel"

    # -- counters -------------------------------------------------------
    def stat(self, name: str) -> str:
        """Total counter, e.g. ``stat:processed``."""
        return f"{self.prefix}stat:{name}"

    def stat_day(self, name: str, day: datetime.date) -> str:
        """Per-day counter (UTC day), e.g. ``stat:processed:2026-11-29``."""
        return f"{self.prefix}stat:{name}:{day.isoformat()}"

    # -- periodic jobs --------------------------------------------------
    @property
    def periodic_last(self) -> str:
        """Hash of periodic entry name -> the last slot (unix time) enqueued for it."""
        return f"{self.prefix}periodic:last"

    @property
    def periodic_state(self) -> str:
        """Hash of periodic entry name -> "enabled" | "disabled", set at run time.

        It wins over ``enabled`` in the config, on every master.
        """
        return f"{self.prefix}periodic:state"

    @property
    def periodic_entries(self) -> str:
        """Hash of periodic entry name -> its definition (JSON), as the last master started.

        Lets ``jobmaster periodic list`` work from a Redis URL alone.
        """
        return f"{self.prefix}periodic:entries"

    # -- dashboard history --------------------------------------------------
    def history(self, minute: int) -> str:
        """The processed/failed totals (JSON) as a master saw them at the start of
        ``minute`` (unix time // 60), kept two hours: the dashboard's throughput chart."""
        return f"{self.prefix}history:{minute}"

    # -- workflows: batches and chains ----------------------------------
    def batch(self, bid: str) -> str:
        """Hash of one batch: description, counters (total, pending, succeeded,
        skipped, dead), ``cancelled``, its callbacks and when each fired."""
        return f"{self.prefix}batch:{bid}"

    def batch_failed(self, bid: str) -> str:
        """Set of the jids of a batch's jobs that failed and have not succeeded since."""
        return f"{self.prefix}batch:{bid}:failed"

    @property
    def batches(self) -> str:
        """Sorted set of batch ids by creation time (for listing them)."""
        return f"{self.prefix}batches"

    def chain(self, cid: str) -> str:
        """Hash of one chain: steps, done, state, the current step's jid."""
        return f"{self.prefix}chain:{cid}"

    # -- the web dashboard ----------------------------------------------
    def web_session(self, sid: str) -> str:
        """A logged-in dashboard session, with the cookie's own lifetime as TTL:
        the signed cookie counts only while this exists (logout deletes it)."""
        return f"{self.prefix}web_session:{sid}"
