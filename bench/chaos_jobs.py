"""The job bench/chaos.py runs under fire (imported by its master as ``app = ["chaos_jobs"]``).

``chaos_jobs.work(token, sleep_ms, bloat_mb)`` counts its start, sleeps
``sleep_ms`` (so kills land on running jobs), then records its completion
in one MULTI: ``SADD chaos:done token`` and ``HINCRBY chaos:runs token 1``.
A completion counted twice is a duplicate run; a token never in
``chaos:done`` (nor in the dead set) is a lost job.

With ``bloat_mb`` it first grows its process by that many MB and keeps them,
so the master's memory killer has a child to recycle.

``chaos_jobs.late(token, mode)`` is run across a stop whose deadline
passes: its first run waits until its own entry has left every in-progress
list (the stop pushed it back), then at once fails (``mode == "fail"``:
raises ``LateFailure``) or succeeds (records its completion), so its end
lands in the narrowest window there is, between the push back and the
process's exit; it notes in ``chaos:late`` whether it saw the push back.
Its later runs just record their completion. ``chaos_jobs.pill(token,
delay_s)`` is a poison pill: it SIGKILLs its own process after ``delay_s``,
while its neighbours in that child run.

Its Redis is the bench's private server, named by ``BENCH_REDIS_URL``. While
that server restarts the recording fails; the job raises, and its retry
(after ``RETRY_BACKOFF`` seconds) runs it again: a run that recorded nothing
is not a run.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import redis

import jobmaster

DONE_KEY = "chaos:done"
RUNS_KEY = "chaos:runs"
STARTS_KEY = "chaos:starts"
LATE_KEY = "chaos:late"  # token -> "pushed back" | "never pushed back", by late's first run
INPROGRESS_PREFIX = "jobmaster:{jobmaster}:inprogress:"  # jobmaster.keys.Keys().inprogress("")
LATE_POLL_S = 0.002
LATE_CAP_S = 60.0  # a first run never pushed back ends after this (noted as such)
RETRY_BACKOFF = 1.0
MB = 1024 * 1024

_lock = threading.Lock()
_client: redis.Redis | None = None
_ballast: list[bytes] = []  # what a bloating job leaves behind in its child


def _redis() -> redis.Redis:
    global _client  # one lazily made client per child (never inherited across fork)
    with _lock:
        if _client is None:
            _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"], socket_timeout=5)
        return _client


@jobmaster.job(name="chaos_jobs.work", retry=25, backoff=RETRY_BACKOFF)
def work(token: str, sleep_ms: float, bloat_mb: int = 0) -> None:
    conn = _redis()
    conn.hincrby(STARTS_KEY, token, 1)
    if bloat_mb:
        # Written, not just reserved: the pages must count in the child's USS.
        _ballast.append(b"\x01" * (bloat_mb * MB))
    time.sleep(sleep_ms / 1000)
    record_done(conn, token)


def record_done(conn: redis.Redis, token: str) -> None:
    with conn.pipeline(transaction=True) as pipe:
        pipe.sadd(DONE_KEY, token)
        pipe.hincrby(RUNS_KEY, token, 1)
        pipe.execute()


# 1 if an entry holding ARGV[1] (a quoted token) is in the list KEYS[1].
HELD_SCRIPT = """
for _, entry in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if string.find(entry, ARGV[1], 1, true) then return 1 end
end
return 0
"""


class LateFailure(Exception):
    """Raised by a late job's first run, after the stop pushed it back."""


@jobmaster.job(name="chaos_jobs.late", retry=25, backoff=RETRY_BACKOFF)
def late(token: str, mode: str) -> None:
    conn = _redis()
    if conn.hincrby(STARTS_KEY, token, 1) > 1:
        record_done(conn, token)  # the run after the push back (or a retry)
        return
    held = conn.register_script(HELD_SCRIPT)
    # Our process's list (its identity is host:pid:nonce): found once, then
    # polled, a few entries a look.
    ours = conn.keys(f"{INPROGRESS_PREFIX}*:{os.getpid()}:*")
    quoted = f'"{token}"'
    give_up = time.monotonic() + LATE_CAP_S
    while ours and held(keys=ours[:1], args=[quoted]) and time.monotonic() < give_up:
        time.sleep(LATE_POLL_S)
    pushed_back = time.monotonic() < give_up
    conn.hset(LATE_KEY, token, "pushed back" if pushed_back else "never pushed back")
    if mode == "fail":
        raise LateFailure(f"{token}: failed after the stop's deadline")
    record_done(conn, token)


@jobmaster.job(name="chaos_jobs.pill", retry=25, backoff=RETRY_BACKOFF)
def pill(token: str, delay_s: float) -> None:
    _redis().hincrby(STARTS_KEY, token, 1)
    time.sleep(delay_s)  # its neighbours in this child are running meanwhile
    os.kill(os.getpid(), signal.SIGKILL)
