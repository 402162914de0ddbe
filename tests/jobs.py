"""Jobs the tests run, including ones that misbehave on purpose.

They record what happened in Redis under ``test:*`` keys (outside any
jobmaster namespace), on the server named by JOBMASTER_REDIS_URL, so a test
can see runs made in another process. ``COUNTS`` is for in-process runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import redis

import jobmaster

COUNTS: Counter[int] = Counter()
_counts_lock = threading.Lock()
_clients: dict[str, redis.Redis] = {}


def store() -> redis.Redis:
    url = os.environ["JOBMASTER_REDIS_URL"]
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
    return _clients[url]


@jobmaster.job(name="tests.count")
def count(number: int) -> None:
    """Counted by the job itself, in process: exactly-once checks."""
    with _counts_lock:
        COUNTS[number] += 1


@jobmaster.job(name="tests.record")
def record(marker: str, seconds: float = 0.0) -> None:
    """Marks start, sleeps, then marks done and counts its runs."""
    client = store()
    client.sadd("test:started", marker)
    if seconds:
        time.sleep(seconds)
    client.hincrby("test:runs", marker, 1)
    client.sadd("test:done", marker)


@jobmaster.job(name="tests.fails", retry=2, backoff=0)
def fails(marker: str) -> None:
    store().hincrby("test:attempts", marker, 1)
    raise ValueError(f"failing on purpose: {marker}")


@jobmaster.job(name="tests.permanent")
def permanent(marker: str) -> None:
    store().hincrby("test:attempts", marker, 1)
    raise jobmaster.Permanent("this input can never work")


@jobmaster.job(name="tests.flaky", retry=5, backoff=0)
def flaky(marker: str, failures: int) -> None:
    """Fails ``failures`` times, then succeeds."""
    client = store()
    if client.hincrby("test:attempts", marker, 1) <= failures:
        raise RuntimeError("not yet")
    client.sadd("test:done", marker)


@jobmaster.job(name="tests.dropped", retry=False)
def dropped(marker: str) -> None:
    store().hincrby("test:attempts", marker, 1)
    raise ValueError("dropped on failure")


@jobmaster.job(name="tests.kill_self")
def kill_self(marker: str) -> None:
    store().hincrby("test:attempts", marker, 1)
    os.kill(os.getpid(), 9)


@jobmaster.job(name="tests.slow_count")
def slow_count(number: int, seconds: float) -> None:
    """Counted in process, after a pause: spreads a batch over a Redis outage."""
    time.sleep(seconds)
    with _counts_lock:
        COUNTS[number] += 1


@jobmaster.job(name="tests.spawn_sleeper")
def spawn_sleeper(marker: str) -> None:
    """Starts a long subprocess, records its pid, then waits (to be killed)."""
    import subprocess

    child = subprocess.Popen(["sleep", "300"])
    store().set(f"test:subprocess:{marker}", child.pid)
    store().sadd("test:started", marker)
    time.sleep(300)


@jobmaster.job(name="tests.run_subprocess")
def run_subprocess(marker: str) -> None:
    """Runs a subprocess to completion: needs SIGCHLD left to job code."""
    import subprocess

    out = subprocess.run(["echo", marker], check=True, capture_output=True, text=True)
    store().set(f"test:output:{marker}", out.stdout.strip())
    store().sadd("test:done", marker)


_LEAKED: list[bytes] = []


@jobmaster.job(name="tests.leak")
def leak(marker: str, megabytes: int, seconds: float = 0.0) -> None:
    """Keeps ``megabytes`` for good (a leak), then records its run."""
    _LEAKED.append(b"x" * (megabytes * 2**20))
    time.sleep(seconds)
    record.func(marker)


@jobmaster.job(name="tests.bloat")
def bloat(marker: str, megabytes: int, seconds: float) -> None:
    """Holds ``megabytes`` while it runs for ``seconds``: a job too big for its child."""
    block = b"x" * (megabytes * 2**20)
    store().sadd("test:started", marker)
    store().hincrby("test:attempts", marker, 1)
    time.sleep(seconds)
    assert block
    record.func(marker)


@jobmaster.job(name="tests.grow")
def grow(marker: str, megabytes: int, per_second: float, hold: float = 0.0) -> None:
    """Grows ``per_second`` MB a second, 10 MB at a time, up to ``megabytes``, and
    keeps it ``hold`` seconds more: a job too big for its container, growing as
    real ones do (an allocation made at once is the kernel's before any sample)."""
    store().hincrby("test:attempts", marker, 1)
    held = []
    for _ in range(megabytes // 10):
        held.append(b"x" * (10 * 2**20))
        time.sleep(10 / per_second)
    store().sadd("test:grown", marker)
    time.sleep(hold)
    record.func(marker)


@jobmaster.job(name="tests.spin", timeout=1, retry=1, backoff=0)
def spin(marker: str) -> None:
    """Pure Python forever: the timeout must interrupt it."""
    store().hincrby("test:attempts", marker, 1)
    while True:
        pass


@jobmaster.job(name="tests.stuck_in_c", timeout=1, retry=0)
def stuck_in_c(marker: str, seconds: float) -> None:
    """CPU-bound in C past its timeout: PBKDF2 runs in OpenSSL with the GIL
    released (about 1.7 M iterations a second here), so other threads go on
    but the JobTimeout cannot land until it returns."""
    import hashlib

    store().hincrby("test:attempts", marker, 1)
    store().sadd("test:started", marker)
    hashlib.pbkdf2_hmac("sha256", b"key", b"salt", int(seconds * 2_000_000))
    store().sadd("test:returned", marker)


def _hook_succeeded(payload: dict[str, object]) -> None:
    store().hset("test:hooks", f"success:{payload['args'][0]}", str(payload["jid"]))  # type: ignore[index]


def _hook_failed(payload: dict[str, object], error: BaseException) -> None:
    store().hset("test:hooks", f"failure:{payload['args'][0]}", type(error).__name__)  # type: ignore[index]


def _hook_raises(payload: dict[str, object]) -> None:
    store().hincrby("test:hooks", "raising", 1)
    raise RuntimeError("a broken hook")


@jobmaster.job(
    name="tests.hooked", retry=1, backoff=0, on_success=_hook_succeeded, on_failure=_hook_failed
)
def hooked(marker: str, fail: bool) -> None:
    store().hincrby("test:attempts", marker, 1)
    if fail:
        raise KeyError(marker)


@jobmaster.job(name="tests.bad_hook", on_success=_hook_raises)
def bad_hook(marker: str) -> None:
    record.func(marker)


@jobmaster.job(name="tests.unique_exec", unique="until_executed")
def unique_exec(marker: str, seconds: float = 0.0) -> None:
    record.func(marker, seconds)


@jobmaster.job(name="tests.unique_started", unique="until_started")
def unique_started(marker: str, seconds: float = 0.0) -> None:
    record.func(marker, seconds)


@jobmaster.job(name="tests.unique_retry", unique="until_executed", retry=1, backoff=2)
def unique_retry(marker: str) -> None:
    store().hincrby("test:attempts", marker, 1)
    raise ValueError("fails, so it waits out a retry")


@jobmaster.job(
    name="tests.unique_by_user", unique="until_executed", unique_args=lambda args, kwargs: [args[0]]
)
def unique_by_user(user_id: int, note: str) -> None:
    record.func(f"{user_id}:{note}")


@jobmaster.job(name="tests.encrypted", encrypt=True, retry=1, backoff=0)
def encrypted(marker: str, *, card: str, fail: bool = False) -> None:
    """Arguments sealed with secret_key; records what it was called with."""
    store().hincrby("test:attempts", marker, 1)
    if fail:
        raise RuntimeError("failing on purpose, so the retry set holds the payload")
    store().hset("test:encrypted", marker, card)


@jobmaster.job(name="tests.encrypted_echo", encrypt=True, retry=0)
def encrypted_echo(card: str, fail: bool = False) -> dict[str, str]:
    """Returns its sealed argument, or raises an error that quotes it: what it
    leaves behind must be sealed too (issue 23, item 3)."""
    if fail:
        raise ValueError(f"card {card} was declined\r\nfaked: line")
    return {"card": card}


@jobmaster.job(name="tests.kill_self_hooked", on_failure=_hook_failed)
def kill_self_hooked(marker: str) -> None:
    """A poison pill with an on_failure hook: the hook must run once, in a worker."""
    store().hincrby("test:attempts", marker, 1)
    os.kill(os.getpid(), 9)


# -- workflows ---------------------------------------------------------------
@jobmaster.job(name="tests.step", retry=0)
def step(marker: str, fail: bool = False) -> None:
    """A chain step or batch job: appends its marker to ``test:order`` (in run order)."""
    store().rpush("test:order", marker)
    if fail:
        raise ValueError(f"step {marker} fails on purpose")


@jobmaster.job(name="tests.step_hooked", retry=0, on_failure=_hook_failed)
def step_hooked(marker: str) -> None:
    """A chain step that fails for good, with its own on_failure hook."""
    store().rpush("test:order", marker)
    raise KeyError(marker)


@jobmaster.job(name="tests.requeues_itself", retry=0)
def requeues_itself() -> None:
    """Enqueues itself again every time: a loop that testing.work() must stop."""
    requeues_itself.enqueue()


@jobmaster.job(name="tests.callback", retry=0)
def callback(kind: str, *, batch_id: str | None = None, chain_id: str | None = None) -> None:
    """A workflow's callback: records which callback of which workflow ran."""
    store().rpush("test:callbacks", f"{kind}:{batch_id or chain_id}")


@jobmaster.job(name="tests.member", retry=0)
def member(number: int, fail: bool = False, seconds: float = 0.0) -> None:
    """A batch job: counts its runs (by number), sleeps, fails if asked."""
    store().hincrby("test:member_runs", str(number), 1)
    if seconds:
        time.sleep(seconds)
    if fail:
        raise RuntimeError(f"member {number} fails on purpose")


@jobmaster.job(name="tests.grows_batch", retry=0)
def grows_batch(count: int) -> None:
    """A batch job that adds ``count`` more jobs to its own batch while it runs."""
    batch = jobmaster.current_batch()
    assert batch is not None, "not running in a batch"
    with batch.jobs():
        for number in range(100, 100 + count):
            member.enqueue(number)
    store().rpush("test:order", "grown")


@jobmaster.job(name="tests.sleeps_then_fails", retry=3, backoff=60)
def sleeps_then_fails(marker: str, seconds: float) -> None:
    """Runs past a stop's deadline, then fails: its late outcome must not be
    recorded once the stop pushed it back."""
    store().sadd("test:started", marker)
    time.sleep(seconds)
    store().sadd("test:ended", marker)
    raise RuntimeError(f"{marker} failed late")


@jobmaster.job(name="tests.swallows_everything", timeout=1, retry=0)
def swallows_everything(marker: str, seconds: float) -> None:
    """A loop that catches ``Exception``, as job code does: a timeout must
    still end it."""
    store().sadd("test:started", marker)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except Exception:  # noqa: S112 - swallowing is what this job is for
            continue
    store().sadd("test:done", marker)


@jobmaster.job(name="tests.kill_self_after", retry=0)
def kill_self_after(marker: str, seconds: float) -> None:
    """A poison pill that lets its neighbours start first."""
    store().hincrby("test:attempts", marker, 1)
    time.sleep(seconds)
    os.kill(os.getpid(), 9)


@jobmaster.job(name="tests.stubborn", retry=3, backoff=0)
def stubborn(marker: str, seconds: float) -> None:
    """Runs ``seconds``, swallowing every ``Exception`` as job code does, and
    notes when it ended (unix time) however it ended: a cancel must stop it
    (``JobCancelled`` is a BaseException), and it must not be retried."""
    client = store()
    client.hincrby("test:attempts", marker, 1)
    client.sadd("test:started", marker)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                time.sleep(0.01)
            except Exception:  # noqa: S112 - swallowing is what this job is for
                continue
        client.sadd("test:done", marker)
    finally:
        client.hset("test:ended_at", marker, repr(time.time()))
