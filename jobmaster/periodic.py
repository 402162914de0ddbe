"""Periodic jobs: the ``[periodic.NAME]`` entries of the config, enqueued on time.

Duties:

- slot math: an entry is due at *slots* (unix times): every ``every`` seconds
  from the unix epoch, so every master on every host computes the same slots,
  or the times its ``cron`` expression matches in its ``timezone``;
- ``PeriodicTicker``, ticked by every master once per loop pass: it enqueues
  one job per due slot with the PERIODIC script, which claims the slot and
  pushes the job in one step, so a slot is enqueued once however many
  masters tick it;
- the operator API: ``list_periodic``, ``enable``, ``disable`` (the CLI's
  ``jobmaster periodic``).

Which slots a tick enqueues, for an entry whose last enqueued slot is L:
the slots after L that came due while this ticker was running (since its
last successful tick, less FRESH seconds of tolerance for a late tick). A
master's first tick counts only the last FRESH seconds, so a deploy in the
middle of the hour does not fire the hourly job. With ``catch_up``, every
slot after a stored L is enqueued too: the ones missed while no master ran.
At most MAX_SLOTS (the latest) per entry and tick.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import time
import zoneinfo
from collections.abc import Iterable, Mapping
from typing import Any

import redis
from croniter import croniter

from jobmaster import payload as wire
from jobmaster.client import Client, default_client
from jobmaster.config import Config, PeriodicEntry
from jobmaster.connection import connect
from jobmaster.errors import NotFound
from jobmaster.keys import Keys
from jobmaster.redis_target import RedisTarget
from jobmaster.scripts import Periodic, PeriodicSlot, Scripts
from jobmaster.unique import LOCK_TTL, UNTIL_EXECUTED, digest

log = logging.getLogger("jobmaster.periodic")

FRESH = 2.0  # seconds: about two ticks of a master's loop, which wakes every second
MAX_SLOTS = 100  # slots one entry may enqueue in one tick (catch-up, outages)
ENABLED, DISABLED = "enabled", "disabled"  # values of keys.periodic_state


class UnknownPeriodicEntry(NotFound):
    """No periodic entry of that name in the config (or registered by a master)."""


# -- slots -----------------------------------------------------------------------
def _cron(entry: PeriodicEntry, at: float) -> croniter:
    start = datetime.datetime.fromtimestamp(at, zoneinfo.ZoneInfo(entry.timezone))
    return croniter(entry.cron, start)


def latest_slot(entry: PeriodicEntry, now: float) -> float:
    """The latest slot at or before ``now``."""
    if entry.every is not None:
        return float(math.floor(now / entry.every) * entry.every)
    # croniter's get_prev is strictly before its start; cron slots are whole seconds.
    return float(_cron(entry, math.floor(now) + 1).get_prev(float))


def next_slot(entry: PeriodicEntry, now: float) -> float:
    """The first slot after ``now``."""
    if entry.every is not None:
        return float((math.floor(now / entry.every) + 1) * entry.every)
    return float(_cron(entry, now).get_next(float))


def previous_slot(entry: PeriodicEntry, slot: float) -> float:
    """The slot before ``slot`` (itself a slot)."""
    if entry.every is not None:
        # From the slot's index, so that float error never skips or repeats one.
        return float((round(slot / entry.every) - 1) * entry.every)
    return float(_cron(entry, slot).get_prev(float))


def slots_after(
    entry: PeriodicEntry, after: float, now: float, limit: int = MAX_SLOTS
) -> tuple[list[float], bool]:
    """The slots in ``(after, now]``, oldest first: the latest ``limit`` of them,
    and whether older ones were left out."""
    found: list[float] = []
    slot = latest_slot(entry, now)
    while slot > after:
        if len(found) == limit:
            return found[::-1], True
        found.append(slot)
        slot = previous_slot(entry, slot)
    return found[::-1], False


def slot_text(slot: float) -> str:
    """A slot as stored in Redis; Lua's tonumber reads back the same double."""
    return str(int(slot)) if slot.is_integer() else repr(slot)


def slot_value(slot: float) -> int | float:
    return int(slot) if slot.is_integer() else slot


def when(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )


def schedule(entry: PeriodicEntry) -> str:
    if entry.every is not None:
        return f"every {entry.every:g}s"
    return f"cron {entry.cron} ({entry.timezone})"


def _text(value: bytes | str) -> str:
    """A hash field or value as text; bytes that are not UTF-8 (written by
    something else) must not stop every tick: the master's Redis thread
    ticked into a UnicodeDecodeError once a minute."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _slot_or_none(raw: bytes | str | None) -> float | None:
    """A stored slot; one that is not a finite number (forged) counts as none."""
    try:
        slot = None if raw is None else float(_text(raw))
    except ValueError:
        return None
    return slot if slot is not None and math.isfinite(slot) else None


def is_enabled(entry: PeriodicEntry, state: bytes | str | None) -> bool:
    """A runtime enable or disable (keys.periodic_state) wins over the config."""
    if state is None:
        return entry.enabled
    return _text(state) == ENABLED


# -- the ticker -------------------------------------------------------------------
class PeriodicTicker:
    """Enqueues the due slots of periodic entries; ticked by the master's loop.

    ``tick`` never raises: a Redis error is logged once per outage and the
    slots are tried again at the next tick; an entry that fails otherwise is
    logged once and skipped, so it cannot stop the master or the others.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        keys: Keys,
        entries: Iterable[PeriodicEntry],
        *,
        fresh: float = FRESH,
        max_slots: int = MAX_SLOTS,
        status_ttl: int = 0,
    ) -> None:
        self.status_ttl = status_ttl  # 0: status tracking off
        self.redis = redis_client
        self.keys = keys
        self.entries = {entry.name: entry for entry in entries}
        self.scripts = Scripts(redis_client)
        self.fresh = fresh
        self.max_slots = max_slots
        # Per entry: its slots after this time came due while this ticker ran
        # (absent until the entry's first tick).
        self.witnessed: dict[str, float] = {}
        self.next_due = -math.inf  # no Redis at all until then: nothing is due
        self.registered = False
        self.failing_since: float | None = None
        self.broken: set[str] = set()
        self.refused: set[str] = set()  # entries whose queue's key holds another type

    def tick(self, now: float) -> list[str]:
        """Enqueue what is due at ``now``; returns one entry name per job enqueued."""
        if not self.entries or now < self.next_due:
            return []
        try:
            enqueued = self._tick(now)
        except redis.RedisError as error:
            if self.failing_since is None:
                self.failing_since = now
                log.warning("periodic: Redis unavailable (%s); retrying at each tick", error)
            return []
        if self.failing_since is not None:
            log.info("periodic: Redis reachable again after %.1fs", now - self.failing_since)
            self.failing_since = None
        self.next_due = min(self._next(entry, now) for entry in self.entries.values())
        return enqueued

    def _tick(self, now: float) -> list[str]:
        # MULTI only for the registry's DEL + HSET, which must never be seen half done.
        pipe = self.redis.pipeline(transaction=not self.registered)
        pipe.hgetall(self.keys.periodic_last)
        pipe.hgetall(self.keys.periodic_state)
        if not self.registered:
            pipe.delete(self.keys.periodic_entries)
            pipe.hset(self.keys.periodic_entries, mapping=self._definitions())
        last, state = pipe.execute()[:2]
        self.registered = True
        last = {_text(k): v for k, v in last.items()}
        state = {_text(k): v for k, v in state.items()}
        enqueued: list[str] = []
        for name, entry in self.entries.items():
            if not is_enabled(entry, state.get(name)):
                self.witnessed[name] = now  # its slots until now are skipped, not owed
                continue
            try:
                witnessed = self.witnessed.get(name)
                slots = self._due(entry, _slot_or_none(last.get(name)), now, witnessed)
                if slots:
                    enqueued += self._enqueue(entry, slots, now)
            except redis.RedisError:
                raise
            except Exception:
                self._broken(name, "could not be enqueued")
            # A tick may come late: slots of the last FRESH seconds stay claimable.
            self.witnessed[name] = now - self.fresh
        return enqueued

    def _due(
        self, entry: PeriodicEntry, last: float | None, now: float, witnessed_after: float | None
    ) -> list[float]:
        """The slots to enqueue; ``witnessed_after`` is None at this ticker's first tick."""
        if entry.catch_up and last is not None:
            after = last
        elif witnessed_after is None:
            # A master's first tick: the current slot, if fresh. Older ones
            # were missed while no master ran (or another one took them).
            slot = latest_slot(entry, now)
            return [slot] if now - slot <= self.fresh and (last is None or slot > last) else []
        else:
            after = max(witnessed_after, -math.inf if last is None else last)
        slots, more = slots_after(entry, after, now, self.max_slots)
        seen = now - self.fresh if witnessed_after is None else witnessed_after
        missed = [slot for slot in slots if slot <= seen]
        if more:
            log.warning(
                "periodic %s: more than %d slots due since %s; enqueuing the latest %d",
                entry.name,
                self.max_slots,
                when(after),
                len(slots),
            )
        elif missed:
            log.info("periodic %s: catching up %d missed slot(s)", entry.name, len(missed))
        return slots

    def _enqueue(self, entry: PeriodicEntry, slots: list[float], now: float) -> list[str]:
        channel = self.keys.wakeup_channel(entry.queue)
        # A unique entry's runs hold the same lock as unique jobs: the worker
        # releases it when the run ends (until_executed), so the next slot
        # is skipped while a run is still queued or running.
        lock = digest(entry.job, entry.args, entry.kwargs, None) if entry.unique else ""
        claims: list[PeriodicSlot] = []
        for slot in slots:
            extra: dict[str, Any] = {"periodic": entry.name, "periodic_slot": slot_value(slot)}
            if entry.unique:
                extra.update(unique=UNTIL_EXECUTED, unique_digest=lock)
            job = wire.build(entry.job, entry.args, entry.kwargs, queue=entry.queue, extra=extra)
            job["enqueued_at"] = now
            jid = str(job["jid"])
            claims.append(
                PeriodicSlot(slot_text(slot), wire.encode(job), jid, self.keys.status(jid))
            )
        call = Periodic(
            last_key=self.keys.periodic_last,
            queue_key=self.keys.queue(entry.queue),
            queues_key=self.keys.queues,
            lock_key=self.keys.unique(lock or "-"),
            entry=entry.name,
            queue=entry.queue,
            wakeup_channel=channel,
            status_ttl=self.status_ttl,
            lock_ttl=LOCK_TTL if entry.unique else 0,
            slots=claims,
        )
        reply = call.run(self.scripts.periodic)
        if isinstance(reply, bytes):  # the queue's key holds another type: nothing done
            self._refused(entry.name, f"{call.queue_key} holds a {reply.decode(errors='replace')}")
            return []
        self.refused.discard(entry.name)
        pushed = int(reply)
        if pushed:
            log.debug(
                "periodic %s: enqueued %s on %s (%d job(s), latest slot %s)",
                entry.name,
                entry.job,
                entry.queue,
                pushed,
                when(slots[-1]),
            )
        return [entry.name] * pushed

    def _next(self, entry: PeriodicEntry, now: float) -> float:
        try:
            return next_slot(entry, now)
        except Exception:
            self._broken(entry.name, "has no next slot")
            return math.inf

    def _refused(self, name: str, why: str) -> None:
        """Logged once until the entry enqueues again: a tick comes every second."""
        if name not in self.refused:
            self.refused.add(name)
            log.error("periodic %s: not enqueued, its slots left unclaimed: %s", name, why)

    def _broken(self, name: str, what: str) -> None:
        if name not in self.broken:
            self.broken.add(name)
            log.exception("periodic %s: %s; skipping it", name, what)

    def _definitions(self) -> Mapping[Any, str]:  # Any: redis-py's key type is a long union
        return {name: json.dumps(dataclasses.asdict(e)) for name, e in self.entries.items()}


# -- the operator API ---------------------------------------------------------------
Source = Config | Client


def _open(source: Source | None) -> tuple[redis.Redis, Keys, dict[str, PeriodicEntry]]:
    """Redis, keys and entries: a config's own entries, else the ones a master registered."""
    if isinstance(source, Config):
        conn = connect(RedisTarget.of(source))
        return conn, Keys(source.namespace), dict(source.periodic)
    client = source if source is not None else default_client()
    raw = client.redis.hgetall(client.keys.periodic_entries)
    return client.redis, client.keys, {_text(k): _from_json(v) for k, v in raw.items()}


def _from_json(raw: bytes | str) -> PeriodicEntry:
    known = {f.name for f in dataclasses.fields(PeriodicEntry)}
    data = json.loads(raw)
    return PeriodicEntry(**{k: v for k, v in data.items() if k in known})


def list_periodic(source: Source | None = None, now: float | None = None) -> list[dict[str, Any]]:
    """Each entry: name, job, schedule, queue, enabled (and any runtime override),
    catch_up, last_run and next_run (unix times, or None), sorted by name.

    ``source`` is a Config (its entries) or a Client (the entries the last
    started master registered); None is the configured producer client.
    """
    conn, keys, entries = _open(source)
    moment = time.time() if now is None else now
    pipe = conn.pipeline(transaction=False)
    pipe.hgetall(keys.periodic_last)
    pipe.hgetall(keys.periodic_state)
    last, state = ({_text(k): v for k, v in found.items()} for found in pipe.execute())
    rows = []
    for name, entry in sorted(entries.items()):
        enabled = is_enabled(entry, state.get(name))
        rows.append(
            {
                "name": name,
                "job": entry.job,
                "schedule": schedule(entry),
                "queue": entry.queue,
                "enabled": enabled,
                "override": _text(state[name]) if name in state else None,
                "catch_up": entry.catch_up,
                "last_run": _slot_or_none(last.get(name)),
                "next_run": next_slot(entry, moment) if enabled else None,
            }
        )
    return rows


def enable(name: str, source: Source | None = None) -> None:
    """Enable an entry on every master, whatever the config says.

    A ``catch_up`` entry does not catch up the slots of the time it was
    disabled: its last slot moves to now (less FRESH, which a tick may still take).
    """
    conn, keys, entries = _known(name, source)
    entry = entries[name]
    if entry.catch_up:
        floor = latest_slot(entry, time.time() - FRESH)

        def advance(pipe: redis.client.Pipeline) -> None:
            stored = _slot_or_none(pipe.hget(keys.periodic_last, name))
            pipe.multi()
            if stored is None or stored < floor:
                pipe.hset(keys.periodic_last, name, slot_text(floor))
            pipe.hset(keys.periodic_state, name, ENABLED)

        conn.transaction(advance, keys.periodic_last)
    else:
        conn.hset(keys.periodic_state, name, ENABLED)


def disable(name: str, source: Source | None = None) -> None:
    """Disable an entry on every master until ``enable``: its slots are skipped."""
    conn, keys, _ = _known(name, source)
    conn.hset(keys.periodic_state, name, DISABLED)


def _known(
    name: str, source: Source | None
) -> tuple[redis.Redis, Keys, Mapping[str, PeriodicEntry]]:
    conn, keys, entries = _open(source)
    if name not in entries:
        names = ", ".join(sorted(entries)) or "none"
        raise UnknownPeriodicEntry(f"no periodic entry named {name!r} (known: {names})")
    return conn, keys, entries
