"""What happens to a job after it ran: decided here, recorded atomically.

``conclude`` makes how a job's run ended (an ``Ending``, from executor.py)
into its one ``Outcome``; it and ``decide_failure`` are pure functions
(unit-tested without Redis). ``record``
stores the outcome and acknowledges the job in one FINISH script, retried
for a while when Redis is away: until it succeeds the job stays in our
in-progress list, so a failure here can cause a second run, never a loss.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import json
import logging
import time
import traceback
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import redis
from redis.commands.core import Script

from jobmaster import crypto, results
from jobmaster import payload as wire
from jobmaster.backoff import DEFAULT_RETRY, Backoff, retry_delay
from jobmaster.errors import JobCancelled, Permanent
from jobmaster.frozen import frozen
from jobmaster.job_options import JobOptions
from jobmaster.recovery import TargetRefused
from jobmaster.scripts import Finish, FinishStep, ScriptCall, WorkflowStep
from jobmaster.unique import LOCK_TTL
from jobmaster.worker import returns
from jobmaster.worker.context import DAY_COUNTER_TTL, WorkerContext
from jobmaster.worker.core import Call, LoopCall, Runner
from jobmaster.workflows.steps import Step, step_of, workflow_step

if TYPE_CHECKING:
    from jobmaster.worker.fetched import FetchedJob

log = logging.getLogger("jobmaster.worker.outcome")

MAX_BACKTRACE_LINES = 40
RECORD_ATTEMPTS_FOR = 30.0  # seconds an outcome keeps being retried (a Redis restart)
SKIPPED_REASON = "its batch was cancelled"
CANCELLED_REASON = "cancelled before it started"


class Kind(str, Enum):
    """How a job's attempt ended. A ``str``: it crosses into the scripts' arguments,
    the batch events (workflows/steps.py) and the metrics as its text."""

    DONE = "done"
    RETRY = "retry"
    DEAD = "dead"
    DROPPED = "dropped"  # failed with retry off
    DEFERRED = "deferred"  # held back by middleware: not an attempt
    SKIPPED = "skipped"  # its batch was cancelled: not run
    CANCELLED = "cancelled"  # jobmaster.cancel: stopped while running, or never started
    EXPIRED = "expired"  # fetched after its expires_in: not run (expiry.py)

    def __str__(self) -> str:  # "done" in log lines, not "Kind.DONE"
        return self.value


STATUS = {
    Kind.DONE: "complete",
    Kind.RETRY: "retrying",
    Kind.DEAD: "dead",
    Kind.DROPPED: "failed",
    Kind.DEFERRED: "scheduled",
    Kind.SKIPPED: "skipped",
    Kind.CANCELLED: "cancelled",
    Kind.EXPIRED: "expired",
}


@frozen  # made for every job: frozen.py says why not @dataclass(frozen=True)
class Outcome:
    kind: Kind
    jid: str
    job: str
    failed: bool = False
    stored: dict[str, Any] | None = None  # the payload for the retry or dead set
    score: float = 0.0  # when it is due (retry) or died (dead)
    reason: str = ""
    started_at: float = 0.0  # unix time: the attempt, for its history
    ended_at: float = 0.0
    error: str = ""  # "ErrorClass: message", for the attempts history
    # The job's on_success/on_failure, bound to this outcome: run once it is recorded.
    hook: Callable[[], Any] | None = None
    unique_digest: str | None = None  # an until_executed job's lock, to release or extend
    workflow: Step | None = None  # its batch or chain, moved by FINISH_STEP
    result: bytes | None = None  # its return value as JSON (returns.py); None: nothing kept
    result_ttl: int | None = None  # seconds its end is kept (None: status_ttl)
    sealed_error: str = ""  # an encrypt=True job's error message, sealed (crypto.py)

    @property
    def status(self) -> str:
        """What ``jobmaster.status(jid)`` says after this outcome."""
        return STATUS[self.kind]

    @property
    def attempted(self) -> bool:
        """Its code ran: an attempt, counted and kept in its history. A deferred
        or skipped job made none, nor did an expired one, nor one cancelled before
        it started."""
        if self.kind is Kind.CANCELLED:
            return self.failed  # stopped while running: a failed attempt
        return self.kind not in (Kind.DEFERRED, Kind.SKIPPED, Kind.EXPIRED)


# -- how a read job's run ended (executor.py), made into its one outcome ------


@dataclass(frozen=True)
class Ran:
    """Its code ran: it returned ``value`` (``error`` None) or raised ``error``."""

    error: BaseException | None = None
    value: Any = None  # its return value, kept as its result (returns.py)


@dataclass(frozen=True)
class HeldBack:
    """Middleware deferred it (``Defer``): back to the scheduled set, not an attempt."""

    seconds: float
    reason: str


@dataclass(frozen=True)
class Skipped:
    """Its batch was cancelled: acknowledged and counted by the batch, never run."""


@dataclass(frozen=True)
class NotStarted:
    """``jobmaster.cancel`` reached it before it started (worker/cancels.py): not
    run, not retried; its batch counts a failure, its unique lock is freed."""


@dataclass(frozen=True)
class Refused:
    """It cannot run (not registered here, arguments refused): buried as it is."""

    reason: str


@dataclass(frozen=True)
class Expired:
    """Fetched after its ``expires_in`` (expiry.py): acknowledged, never run, in
    no set; for its batch or chain a failure for good (it will never run)."""

    expires_in: object  # as the payload says it, for the reason


Ending = Ran | HeldBack | Skipped | NotStarted | Refused | Expired


def conclude(job: FetchedJob, ending: Ending, started_at: float, ended_at: float) -> Outcome:
    """The outcome of ``job``, built once, with everything FINISH and the hook need:
    its workflow step and unique lock as read (fetched.py), its hook bound.

    ``ended_at`` is also the decision's "now" (a retry's due time counts from it).
    What each ending carries is as it always was: a deferred job keeps its lock
    and moves no workflow; a skipped one moves its batch and names no lock.
    """
    if isinstance(ending, Refused):
        return bad_payload(job.raw, ending.reason, job.queue, started_at, ended_at)
    if isinstance(ending, Skipped | Expired):
        return _not_run(job, ending, started_at, ended_at)
    if isinstance(ending, HeldBack):
        return Outcome(
            Kind.DEFERRED,
            job.jid,
            job.name,
            stored=dict(job.payload),
            score=ended_at + ending.seconds,
            reason=ending.reason,
            unique_digest=job.until_executed,
            started_at=started_at,
            ended_at=ended_at,
        )
    if isinstance(ending, NotStarted) or isinstance(ending.error, JobCancelled):
        return _cancelled(job, ending, started_at, ended_at)
    error, options = ending.error, job.options
    hook = _hook(job.wire, options, error)
    if error is None:
        return Outcome(
            Kind.DONE,
            job.jid,
            job.name,
            hook=hook,
            unique_digest=job.until_executed,
            workflow=job.step,
            started_at=started_at,
            ended_at=ended_at,
            result=_sealed_result(job, returns.encode(ending.value, job.jid, job.name)),
            result_ttl=returns.result_ttl(job.payload),
        )
    verdict = _failure(job.payload, error, options.backoff, ended_at, options.retry)
    return Outcome(
        verdict.kind,
        job.jid,
        job.name,
        failed=True,
        stored=verdict.stored,
        score=verdict.score,
        reason=verdict.reason,
        error=verdict.error,
        sealed_error=verdict.sealed_error,
        hook=hook if verdict.kind in (Kind.DEAD, Kind.DROPPED) else None,
        unique_digest=job.until_executed,
        workflow=job.step,
        started_at=started_at,
        ended_at=ended_at,
        result_ttl=returns.result_ttl(job.payload),
    )


def _sealed_result(job: FetchedJob, result: bytes | None) -> bytes | None:
    """An encrypt=True job's result sealed as its arguments are (SPEC §8): it
    often holds them. Only such jobs pay for it."""
    if result is None or not crypto.is_sealed(job.payload):
        return result
    return crypto.seal_text(result.decode(), job.jid, crypto.RESULT).encode()


def _not_run(
    job: FetchedJob, ending: Skipped | Expired, started_at: float, ended_at: float
) -> Outcome:
    """Never run: its batch was cancelled, or it expired. Either moves its batch
    or chain; an expired job's ``until_executed`` lock is released (it will never
    run), while a skipped one names none, as before."""
    if isinstance(ending, Skipped):
        kind, reason, lock = Kind.SKIPPED, SKIPPED_REASON, None
    else:
        reason = f"not started within {ending.expires_in}s of its creation"
        kind, lock = Kind.EXPIRED, job.until_executed
    return Outcome(
        kind,
        job.jid,
        job.name,
        reason=reason,
        unique_digest=lock,
        started_at=started_at,
        ended_at=ended_at,
        workflow=job.step,
    )


def _cancelled(
    job: FetchedJob, ending: NotStarted | Ran, started_at: float, ended_at: float
) -> Outcome:
    """Stopped by ``jobmaster.cancel``: status cancelled, no retry, no dead set,
    no hook (nothing failed); a failure for its batch, the end of its chain."""
    error = ending.error if isinstance(ending, Ran) else None
    return Outcome(
        Kind.CANCELLED,
        job.jid,
        job.name,
        failed=error is not None,  # it ran: a failed attempt, counted as one
        reason=CANCELLED_REASON if error is None else str(error),
        error=f"{type(error).__name__}: {error}" if error is not None else "",
        unique_digest=job.until_executed,
        workflow=job.step,
        started_at=started_at,
        ended_at=ended_at,
    )


def _hook(
    payload: dict[str, Any], options: JobOptions, error: BaseException | None
) -> Callable[[], Any] | None:
    """The job's hook an ending calls for: on_success after a success, on_failure
    after a failure (bound only if it fails for good: dead or dropped)."""
    if error is None and options.on_success is not None:
        success = options.on_success
        return lambda: success(payload)
    if error is not None and options.on_failure is not None:
        failure = options.on_failure
        return lambda: failure(payload, error)
    return None


# -- the decisions, pure ---------------------------------------------------------


def succeeded(payload: Mapping[str, Any]) -> Outcome:
    return Outcome(Kind.DONE, str(payload["jid"]), str(payload["job"]), workflow=step_of(payload))


def bad_payload(
    raw: bytes, reason: str, queue: str, started_at: float = 0.0, ended_at: float = 0.0
) -> Outcome:
    entry = wire.buried(raw, reason, queue)
    return Outcome(
        Kind.DEAD,
        str(entry["jid"]),
        str(entry.get("job")),
        failed=True,
        stored=entry,
        score=float(entry["died_at"]),
        reason=reason,
        started_at=started_at,
        ended_at=ended_at,
        error=f"BadPayload: {reason}",
    )


def error_fields(error: BaseException) -> dict[str, Any]:
    """Error class, message and a bounded backtrace, kept on the job for operators."""
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    backtrace = "".join(lines).splitlines()[-MAX_BACKTRACE_LINES:]
    return {
        "error_class": type(error).__name__,
        "error_message": str(error)[:2000],
        "error_backtrace": backtrace,
    }


class Verdict(NamedTuple):
    """What a failure comes to (``_failure``)."""

    kind: Kind
    stored: dict[str, Any] | None
    score: float
    reason: str
    error: str  # "ErrorClass: message" ("ErrorClass: (sealed)" for an encrypt=True job)
    sealed_error: str = ""  # its message, sealed (encrypt=True jobs only)


def decide_failure(
    payload: Mapping[str, Any],
    error: BaseException,
    backoff: Backoff | None,
    now: float,
    default_retry: int | bool = DEFAULT_RETRY,
) -> Outcome:
    """The outcome of a failed attempt of ``payload`` (see ``_failure``)."""
    verdict = _failure(payload, error, backoff, now, default_retry)
    return Outcome(
        verdict.kind,
        str(payload["jid"]),
        str(payload["job"]),
        failed=True,
        stored=verdict.stored,
        score=verdict.score,
        reason=verdict.reason,
        error=verdict.error,
        sealed_error=verdict.sealed_error,
        workflow=step_of(payload),
    )


def _failure(
    payload: Mapping[str, Any],
    error: BaseException,
    backoff: Backoff | None,
    now: float,
    default_retry: int | bool,
) -> Verdict:
    """Retry after a backoff, bury in the dead set, or drop, by the job's ``retry``.

    ``retry_count`` counts failures so far; ``retry = N`` allows N retries
    after the first failure, so ``retry = 0`` is dead at once. A payload
    without ``retry`` (pushed by a producer that doesn't know the job) gets
    the registered job's option, ``default_retry``.
    """
    fields = error_fields(error)
    sealed = crypto.is_sealed(payload)
    # An encrypt=True job's error text often quotes its arguments: what is
    # stored (the entry, the attempt, the dead reason) names the class only,
    # the text is sealed beside it (crypto.SEALED_ERROR).
    message = SEALED if sealed else str(error)
    described = f"{type(error).__name__}: {message}"
    retry = payload.get("retry", default_retry)
    count = int(payload.get("retry_count", 0) or 0) + 1
    stored = {**payload, **fields, "retry_count": count, "failed_at": now}
    if retry is False:
        kind, score, reason = Kind.DROPPED, 0.0, "retry is off"
        return _verdict(kind, None, score, reason, described, fields, payload, sealed)
    limit = DEFAULT_RETRY if retry is True or not isinstance(retry, int) else retry
    if isinstance(error, Permanent):
        reason = f"{type(error).__name__}: {message} (permanent, not retried)"
    elif count > limit:
        reason = f"retries exhausted ({limit}): {type(error).__name__}: {message}"
    else:
        # A per-enqueue ``options(backoff=N)`` travels in the payload and wins
        # over the job's registered default.
        if isinstance(payload.get("backoff"), int | float):
            backoff = float(payload["backoff"])
        due = now + retry_delay(count, backoff)
        return _verdict(Kind.RETRY, stored, due, described, described, fields, payload, sealed)
    stored.update(dead_reason=reason, died_at=now)
    return _verdict(Kind.DEAD, stored, now, reason, described, fields, payload, sealed)


SEALED = "(sealed)"  # an encrypt=True job's error message, where it would be in clear


def _verdict(
    kind: Kind,
    stored: dict[str, Any] | None,
    score: float,
    reason: str,
    described: str,
    fields: dict[str, Any],
    payload: Mapping[str, Any],
    sealed: bool,
) -> Verdict:
    """The verdict; for an encrypt=True job, its error's message and backtrace
    sealed (one token, in the stored entry and the attempt) and cleared."""
    if not sealed:
        return Verdict(kind, stored, score, reason, described)
    plain = {"error_message": fields["error_message"], "error_backtrace": fields["error_backtrace"]}
    token = crypto.seal_text(json.dumps(plain), str(payload.get("jid")), crypto.ERROR)
    if stored is not None:
        stored.update(error_message=SEALED, error_backtrace=[], **{crypto.SEALED_ERROR: token})
    return Verdict(kind, stored, score, reason, described, token)


def run_hook(outcome: Outcome) -> None:
    """Run the outcome's hook; one that raises is logged and changes nothing."""
    if outcome.hook is None:
        return
    try:
        outcome.hook()
    except Exception:
        log.exception(
            "hook of jid=%s job=%s failed",
            outcome.jid,
            outcome.job,
            extra={"jid": outcome.jid, "job": outcome.job},
        )


async def arun_hook(outcome: Outcome) -> None:
    """``run_hook`` for an async job: an ``async def`` hook is awaited on the
    loop, a plain one runs in a thread (it may block: send a mail, query)."""
    if outcome.hook is None:
        return
    try:
        returned = await asyncio.to_thread(outcome.hook)
        if inspect.isawaitable(returned):
            await returned
    except Exception:
        log.exception(
            "hook of jid=%s job=%s failed",
            outcome.jid,
            outcome.job,
            extra={"jid": outcome.jid, "job": outcome.job},
        )


def finish_call(
    ctx: WorkerContext, raw: bytes, outcome: Outcome, queue: str = ""
) -> tuple[Script, ScriptCall, Finish, str]:
    """The script call that records ``outcome`` of the job ``raw`` (FINISH, or
    FINISH_STEP for a workflow's job), its FINISH part, and the set it goes to.

    The stored payload is encoded once, here, so a call sent again after a
    lost reply writes the same member and cannot duplicate it.
    """
    keys, now = ctx.keys, time.time()
    day = datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc).date()
    target = {"retry": keys.retry, "dead": keys.dead, "deferred": keys.scheduled}.get(
        outcome.kind, keys.dead
    )
    ran = outcome.attempted
    # What FINISH counts as it acknowledges (its "processed" keys): a run, or
    # for a job that expired, the expired counters (the job did not run).
    counted = "expired" if outcome.kind is Kind.EXPIRED else "processed"
    lock_action, lock_ttl = "", 0
    if outcome.unique_digest is not None:
        # Kept through a retry's wait (extended past it), released at the end.
        lock_action = "extend" if outcome.kind in ("retry", "deferred") else "release"
        lock_ttl = round(max(0.0, outcome.score - now)) + LOCK_TTL
    limits = ctx.dead_limits
    status, tracking = outcome.status, ctx.status_ttl  # each read once: per job
    ended = status in results.ENDED
    # An end is kept the job's result_ttl, its status, attempts and result alike;
    # a retry's status lives through its wait, then status_ttl (SPEC §11).
    status_ttl = (outcome.result_ttl if ended else None) or tracking
    if tracking and outcome.kind in ("retry", "deferred"):
        status_ttl = results.waiting_ttl(tracking, outcome.score, now)
    error_class, _, error_message = outcome.error.partition(": ")
    attempt = {
        "started_at": outcome.started_at,
        "ended_at": outcome.ended_at,
        "outcome": status,
        "error_class": error_class or None,
        "error_message": error_message or None,
        "worker": ctx.name,
        "job": outcome.job,  # the job's page names it once the job has left every list
        "queue": queue or None,
    }
    if outcome.sealed_error:
        attempt[crypto.SEALED_ERROR] = outcome.sealed_error
    finish = Finish(
        inprogress_key=ctx.inprogress_key,
        processed_key=keys.stat(counted),
        processed_day_key=keys.stat_day(counted, day),
        failed_key=keys.stat("failed"),
        failed_day_key=keys.stat_day("failed", day),
        target_key=target,
        status_key=keys.status(outcome.jid),
        attempts_key=keys.attempts(outcome.jid),
        lock_key=keys.unique(outcome.unique_digest or "-"),
        payload=raw,
        failed=("1" if outcome.failed else "0") if ran or counted == "expired" else "-",
        day_ttl=DAY_COUNTER_TTL,
        target_kind={"retry": "retry", "dead": "dead", "deferred": "retry"}.get(outcome.kind, ""),
        stored=wire.encode(outcome.stored) if outcome.stored is not None else b"",
        score=outcome.score,
        dead_cap=limits.max_jobs,
        dead_cutoff=limits.cutoff(now),
        status=status if tracking else "",
        attempt=json.dumps(attempt) if ran else "",
        status_ttl=status_ttl or 1,
        lock_action=lock_action,
        jid=outcome.jid,
        lock_ttl=lock_ttl,
        result_key=keys.result(outcome.jid),
        result=outcome.result if tracking and outcome.result is not None else b"",
        # An end wakes whoever waits in jobmaster.result (results.py).
        ended_channel=keys.ended_channel(outcome.jid) if tracking and ended else "",
        waiter_key=keys.result_waiter(outcome.jid),
    )
    script = ctx.scripts.finish
    step: WorkflowStep | None = None
    if outcome.workflow is not None:
        # Built once, like the stored payload: a retried call pushes the same
        # next step (same jid), which the script pushes only once anyway.
        script = ctx.scripts.finish_step
        step = workflow_step(keys, outcome.kind, outcome.workflow, bool(tracking))
    call: ScriptCall = finish if step is None else FinishStep(finish, step)
    return script, call, finish, target


Sent = tuple[Call, str]  # a FINISH to send, and the status key it writes
Pause = float  # seconds to wait before the next attempt
Recorded = bool | TargetRefused  # the end of a recording (see ``recording``)


def recording(
    ctx: WorkerContext,
    raw: bytes,
    outcome: Outcome,
    queue: str,
    frees: Runner | None,
    make: type[Call],
) -> Generator[Sent | Pause, None, Recorded]:
    """The steps of recording ``outcome``, whoever waits between them: a job
    thread (``record``) or a coroutine on the event loop (``arecord``).

    Yields the FINISH to send (settled once the step resumes) or a pause;
    returns whether Redis has the outcome, or the set that refused it.
    """
    script, finish_args, finish, target = finish_call(ctx, raw, outcome, queue)
    keys, argv = finish_args.keys(), finish_args.argv()
    deadline = time.monotonic() + RECORD_ATTEMPTS_FOR
    delay = 0.1
    # A reply lost to a timeout or a dropped connection does not mean FINISH
    # did not run: a Redis blocked past our socket timeout (a slow command,
    # DEBUG SLEEP) runs it once it wakes, after we gave up. A second FINISH
    # would then count the job twice and add a second attempt to its history,
    # but FINISH does nothing unless the payload is still listed, and the late
    # call runs before the one sent again: a Redis waking up serves its
    # connections in the order their data arrived (and a new connection is
    # accepted first), and a command held by CLIENT PAUSE is dropped with its
    # closed connection. So the outcome is recorded once, by whichever call
    # removes the payload; ``resent`` only tells the log which it was. (One
    # case it cannot tell: two entries of the same bytes, a producer's LPUSH
    # sent twice, both in this process. A call sent again after a late one
    # ran takes the other copy's entry: both runs recorded, the other's
    # thread then records nothing.)
    resent = False
    while True:
        # In the I/O core's next round trip, with the FINISH of other jobs
        # ending now and the fetch of this runner's next job (core.py); a
        # "working" mark still waiting is moot now.
        call = make(script, keys, argv, frees)
        yield call, finish.status_key
        error = call.error
        if error is None:
            listed = call.reply
            if isinstance(listed, bytes):  # the retry or dead set holds another type
                return TargetRefused(target, listed.decode())
            return _recorded(outcome, listed=bool(listed), resent=resent)
        if not isinstance(error, redis.RedisError):
            raise error
        if isinstance(error, redis.ConnectionError | redis.TimeoutError):
            resent = True
        if time.monotonic() + delay > deadline:
            log.error(
                "could not record outcome %s of jid=%s job=%s: %s; it stays in progress "
                "and will be requeued",
                outcome.kind,
                outcome.jid,
                outcome.job,
                error,
                extra={"jid": outcome.jid, "job": outcome.job},
            )
            return False
        yield delay
        delay = min(delay * 2, 2.0)


def record(
    ctx: WorkerContext,
    raw: bytes,
    outcome: Outcome,
    queue: str = "",
    *,
    frees: Runner | None = None,
) -> bool:
    """Store the outcome and acknowledge the job; True once Redis has it, False
    if Redis stayed away, if the job was no longer ours to record, or if the
    outcome can land nowhere (``_refused``). ``frees``: the runner's job
    (fetch.Unit) when its own runner records it: that runner is free for the
    job fetched in the same round trip.
    """
    steps = recording(ctx, raw, outcome, queue, frees, Call)
    try:
        step = next(steps)
        while True:
            if isinstance(step, float):
                time.sleep(step)
            else:
                ctx.core.send(*step)
            step = next(steps)
    except StopIteration as done:
        ended: Recorded = done.value
    if isinstance(ended, TargetRefused):
        return _refused(ctx, raw, outcome, ended)
    return ended


async def arecord(
    ctx: WorkerContext,
    raw: bytes,
    outcome: Outcome,
    queue: str = "",
    *,
    frees: Runner | None = None,
) -> bool:
    """``record`` for an async job, on its event loop: the loop runs other jobs
    while the FINISH waits for its round trip."""
    steps = recording(ctx, raw, outcome, queue, frees, LoopCall)
    try:
        step = next(steps)
        while True:
            if isinstance(step, float):
                await asyncio.sleep(step)
            else:
                call, settles = step
                await ctx.core.asend(cast(LoopCall, call), settles)
            step = next(steps)
    except StopIteration as done:
        ended: Recorded = done.value
    if isinstance(ended, TargetRefused):  # rare: a set of another type; off the loop
        return await asyncio.to_thread(_refused, ctx, raw, outcome, ended)
    return ended


def _refused(ctx: WorkerContext, raw: bytes, outcome: Outcome, refused: TargetRefused) -> bool:
    """FINISH wrote nothing: the set the outcome goes to holds another type.

    Retrying would never help, and the self-check would run the job again a
    minute later, forever. A retry or a deferral goes to the dead set with
    the reason instead (SPEC §8: it can never land); a death whose dead set
    is refused stays in our in-progress list, logged, and is found again by
    the self-check. True if the job left the list (buried).
    """
    if outcome.kind is Kind.DEAD or outcome.stored is None:
        log.error(
            "could not record outcome %s of jid=%s job=%s: %s; it stays in progress",
            outcome.kind,
            outcome.jid,
            outcome.job,
            refused,
            extra={"jid": outcome.jid, "job": outcome.job},
        )
        return False
    what = "retry" if outcome.kind is Kind.RETRY else "deferral"
    reason = f"its {what} could not be stored: {refused}"
    report = ctx.recovery.bury(ctx.inprogress_key, raw, reason, None, entry=outcome.stored)
    return bool(report.buried)


def _recorded(outcome: Outcome, *, listed: bool, resent: bool) -> bool:
    """Whether FINISH stored the outcome (it does nothing once the job is not ours)."""
    context = {"jid": outcome.jid, "job": outcome.job}
    if listed:
        return True
    if resent:
        log.info(
            "outcome %s of jid=%s job=%s was stored by an earlier call, whose reply was lost",
            outcome.kind,
            outcome.jid,
            outcome.job,
            extra=context,
        )
        return True
    log.warning(
        "outcome %s of jid=%s job=%s not recorded: the job is no longer in this process's "
        "in-progress list (pushed back or recovered), so its next run records it",
        outcome.kind,
        outcome.jid,
        outcome.job,
        extra=context,
    )
    return False
