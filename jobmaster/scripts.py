"""Every Lua script jobmaster runs, with its KEYS and ARGV, in one place.

A multi-step change that must not be seen half done (a job in two places, or
in none) is one script: Redis runs a script atomically. Every key a script
touches is passed in KEYS and shares the namespace's hash tag (see keys.py),
so the scripts are Redis Cluster safe.

Scripts are registered with redis-py's ``Script``, which calls EVALSHA and
reloads the script on NOSCRIPT (after a Redis restart or failover, or on a
fresh server that replaced the old one).

Out of memory. A Redis over its ``maxmemory`` (``noeviction``) refuses a
script's command that could grow memory only until the script has run its
first write command: it never stops a script half way. So PUSH, FETCH,
PERIODIC, PUSH_UNIQUE and MARK, whose first write is such a command, are
refused whole, with nothing done (the caller backs off or raises EnqueueError),
while FINISH, TRANSFER and BURY, which begin with an LREM/ZREM (writes Redis never
refuses, since they free memory), run to the end: outcomes,
acknowledgements and requeues are still recorded when Redis is full. That
holds for scripts without a ``#!lua`` shebang; one with a shebang is refused
whole under OOM unless it declares ``allow-oom``: keep that in mind before
adding one.

Status lifetimes (SPEC §11: a status lives as long as its job waits or runs,
then ``status_ttl``). A job's status is written by the script that moves the
job, so its TTL follows where the job is:
- in a queue: "queued" with no TTL at all (PUSH, PUSH_UNIQUE, PERIODIC, a
  batch's or a chain's push, TRANSFER into a queue). How long a job waits in
  a queue is not known when it is pushed, and refreshing every waiting
  job's status would cost work per job and per pass. A queued job leaves its
  queue only by FETCH (then its status is rewritten with a TTL by MARK,
  FINISH, TRANSFER or BURY, or it is "queued" again after a requeue), by
  CANCEL (its end, with a TTL), or by a deletion (``Queue.delete`` and
  ``Queue.clear``, which give the statuses of what they drop a TTL,
  EXPIRE_WAITING, a page at a time): no status without a TTL outlives its
  job's place in a queue.
- scheduled or waiting for a retry: its wait plus ``status_ttl``
  (results.waiting_ttl);
- running: "working", kept alive by its process's heartbeat (MARK again:
  worker/core.py) while the job runs;
- ended: ``status_ttl`` (or the job's ``result_ttl``) from its end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from jobmaster.frozen import frozen

# One ARGV value, as redis-py sends it.
Arg = str | bytes | int | float


class ScriptCall(ABC):
    """A script's inputs by name: below each script, a frozen dataclass whose
    fields are its KEYS and ARGV, which ``keys()`` and ``argv()`` put in the
    order its Lua reads them. A caller that counted positions (``less the jid
    (ARGV[13])``) broke silently when a script grew an argument;
    tests/unit/test_script_builders.py pins each field to its index instead."""

    @abstractmethod
    def keys(self) -> list[str]: ...

    @abstractmethod
    def argv(self) -> list[Arg]: ...

    def run(self, script: Script, client: Any = None) -> Any:
        """``script`` (the one this call is for) with these KEYS and ARGV, on
        ``client`` (a pipeline, say) if given."""
        return script(keys=self.keys(), args=self.argv(), client=client)


# PUSH: enqueue payloads on one queue, mark them queued, wake idle workers.
# KEYS[1] queue list, KEYS[2] set of queue names,
# KEYS[3..] each payload's status key, in payload order (none when ARGV[3] is 0)
# ARGV[1] queue name, ARGV[2] wakeup channel, ARGV[3] status on (> 0; 0 = off;
# a queued status has no TTL: module docstring), ARGV[4..] payloads
# Returns the number of payloads pushed.
# A queue key of another type fails the first LPUSH, which writes nothing (nor
# does an OOM refusal of it: the script's first write), so it is the check:
# the key's TYPE is read only then, for the error that names it, and the
# script has nothing to undo (a later chunk meets a list it just wrote to).
# The wakeup is PUBLISHed only when this push made the queue non-empty (the
# last LPUSH's length is the number pushed): a worker sleeps only after a
# fetch found its queues empty, so a queue that held jobs has no sleeper to
# wake on its account; the push that filled it published, and a fetch that
# leaves jobs behind wakes the next idle thread itself (worker/fetch.py),
# with the listener's one-second look as the fallback for a lost message.
# The queue's name joins the set of queue names on that push too: the name
# leaves the set only with its queue empty (``Queue.clear``, which adds it
# back if a push came meanwhile), so a queue holding jobs is in it already.
PUSH = """
local n = #ARGV - 3
local length = 0
for i = 4, #ARGV, 500 do
  length = redis.pcall('LPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 499, #ARGV)))
  if type(length) == 'table' then
    local held = redis.call('TYPE', KEYS[1])['ok']
    if held ~= 'list' and held ~= 'none' then
      return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' holds a ' .. held .. ': nothing pushed')
    end
    return length  -- refused (out of memory) before any write: the error as it came
  end
end
if tonumber(ARGV[3]) > 0 then  -- no TTL while it waits (module docstring)
  for i = 3, #KEYS do redis.call('SET', KEYS[i], 'queued') end
end
if length == n then
  redis.pcall('SADD', KEYS[2], ARGV[1])
  redis.call('PUBLISH', ARGV[2], n)
end
return n
"""


@dataclass(frozen=True)
class Push(ScriptCall):
    queue_key: str
    queues_key: str
    queue: str
    wakeup_channel: str
    status_ttl: int
    payloads: Sequence[bytes]
    status_keys: Sequence[str] = ()  # one per payload; none when status_ttl is 0

    def keys(self) -> list[str]:
        return [self.queue_key, self.queues_key, *self.status_keys]

    def argv(self) -> list[Arg]:
        return [self.queue, self.wakeup_channel, self.status_ttl, *self.payloads]


# FETCH: reliable fetch. Moves the oldest payloads of the first non-paused,
# non-empty queues into this worker's in-progress list, in one step, so a
# job is never only in the worker's memory. Takes up to ARGV[1] jobs (the
# runners of the process free at that moment: one round trip serves them
# all), from the first queue in the given order and, if it runs dry, from the
# next ones: an LMOVE, then one RPOP and one LPUSH for the rest, whatever the
# count (a second LMOVE when one more is all that is wanted). The LMOVE comes
# first because Redis refuses it when full (OOM) and then lets the script's
# later writes through: a full Redis takes no work
# out of its queues (RPOP, which frees memory, would have passed, and the
# job's outcome would then have grown Redis past its limit).
# It does not mark the jobs "working": a job's status key is named after its
# jid, unknown until the payload is read, and every key a script touches must
# be in KEYS. A job is marked when it starts, by MARK, in a round trip the
# process makes anyway (see worker/core.py).
# KEYS[1] in-progress list, KEYS[2] paused set, KEYS[3..] queue lists
# ARGV[1] the most jobs to take, ARGV[2..] queue names, in the order of KEYS[3..]
# Returns {payload, its queue name, payload, its queue name, ...}, oldest
# first (fewer than ARGV[1] jobs: every queue is empty or paused now), or nil
# when there was none.
FETCH = """
local want = tonumber(ARGV[1])
local taken, got = {}, 0
for i = 3, #KEYS do
  if got >= want then break end
  local name = ARGV[i - 1]
  if redis.call('SISMEMBER', KEYS[2], name) == 0 then
    local first = redis.call('LMOVE', KEYS[i], KEYS[1], 'RIGHT', 'LEFT')
    if first then
      taken[#taken + 1] = first
      taken[#taken + 1] = name
      got = got + 1
      local more, rest = want - got, false
      if more == 1 then  -- one more: an LMOVE is one command, RPOP and LPUSH two
        local payload = redis.call('LMOVE', KEYS[i], KEYS[1], 'RIGHT', 'LEFT')
        if payload then rest = {payload} end
      elseif more > 1 then
        rest = redis.call('RPOP', KEYS[i], more)
        if rest then redis.call('LPUSH', KEYS[1], unpack(rest)) end
      end
      if rest then
        for _, payload in ipairs(rest) do
          taken[#taken + 1] = payload
          taken[#taken + 1] = name
        end
        got = got + #rest
      end
    end
  end
end
if got == 0 then return nil end
return taken
"""


@dataclass(frozen=True)
class Fetch(ScriptCall):
    inprogress_key: str
    paused_key: str
    most: int
    queues: Sequence[tuple[str, str]]  # (queue name, its list key), in fetch order

    def keys(self) -> list[str]:
        return [self.inprogress_key, self.paused_key, *(key for _, key in self.queues)]

    def argv(self) -> list[Arg]:
        return [self.most, *(name for name, _ in self.queues)]


# GIVE_BACK: jobs a fetch took beyond the room of the runners they need (a
# process with thread and async runners cannot choose by kind what FETCH
# takes: worker/fetch.py) go back to the front of their queues, in their
# order, at once: never held by a process that cannot run them yet. Each is
# moved only if still in the in-progress list (a stop's push back may have
# moved it first); their status is untouched ("queued": they never started).
# A queue that was empty before is woken, as PUSH wakes it, so an idle
# process of the pool takes the job now rather than at its next look.
# KEYS[1] in-progress list, KEYS[2..] queue lists (one per job, repeats allowed)
# ARGV[1] wakeup channel prefix, then triples in the order of KEYS[2..]: the
# payload as fetched, its queue name, the count of jobs given back to that
# queue by this call (the wakeup's "N jobs arrived")
# Returns the number of jobs given back. A queue key of another type (forged)
# refuses its job, which stays in progress: the self-check's requeue buries it
# with the reason.
GIVE_BACK = """
local given = 0
for i = #KEYS, 2, -1 do
  local payload = ARGV[3 * i - 4]
  if redis.call('LREM', KEYS[1], 1, payload) == 1 then
    local length = redis.pcall('RPUSH', KEYS[i], payload)
    if type(length) == 'table' then
      redis.call('LPUSH', KEYS[1], payload)
    else
      given = given + 1
      if length == 1 then redis.call('PUBLISH', ARGV[1] .. ARGV[3 * i - 3], ARGV[3 * i - 2]) end
    end
  end
end
return given
"""


@dataclass(frozen=True)
class GiveBack(ScriptCall):
    inprogress_key: str
    wakeup_prefix: str
    # (payload, its queue name, its queue's key), oldest first
    jobs: Sequence[tuple[bytes, str, str]]

    def keys(self) -> list[str]:
        return [self.inprogress_key, *(key for _, _, key in self.jobs)]

    def argv(self) -> list[Arg]:
        counts = Counter(queue for _, queue, _ in self.jobs)
        args: list[Arg] = [self.wakeup_prefix]
        for raw, queue, _ in self.jobs:
            args += [raw, queue, counts[queue]]
        return args


# MARK: mark jobs that started as "working", each only if its payload is
# still in the in-progress list: a job pushed back, recovered from under us
# or already acknowledged keeps the status it has.
# KEYS[1] in-progress list, KEYS[2..] each job's status key
# ARGV pairs, in the order of KEYS[2..]: the job's payload as fetched, and the
# status's TTL in ms (status_ttl less the time it has run, so that the TTL
# still tells when it started: the dashboard's runtime)
# Returns the number of jobs marked.
MARK = """
local marked = 0
for i = 2, #KEYS do
  if redis.call('LPOS', KEYS[1], ARGV[2 * i - 3]) then
    redis.call('SET', KEYS[i], 'working', 'PX', ARGV[2 * i - 2])
    marked = marked + 1
  end
end
return marked
"""


@dataclass(frozen=True)
class Mark(ScriptCall):
    inprogress_key: str
    marks: Sequence[tuple[str, bytes, int]]  # (status key, payload as fetched, TTL in ms)

    def keys(self) -> list[str]:
        return [self.inprogress_key, *(key for key, _, _ in self.marks)]

    def argv(self) -> list[Arg]:
        return [value for _, raw, ttl_ms in self.marks for value in (raw, ttl_ms)]


# A job's status when the process moving it keeps none (track_status off
# there: its new status is ''), while a producer that keeps them wrote
# "queued" with no TTL: the job leaving its queue for anything but a queue
# gives that status ``ttl``, or it would outlive the job for good (module
# docstring, "Status lifetimes"). A status that has a TTL keeps it.
EXPIRE_LEFT = """
local function expire_left(key, ttl)
  if redis.call('TTL', key) == -1 then redis.call('EXPIRE', key, ttl) end
end
"""


# FINISH: record a job's outcome and acknowledge it, as one step, so the
# job leaves the in-progress list only once its outcome is stored.
# KEYS[1] in-progress list, KEYS[2] processed total, KEYS[3] processed today,
# KEYS[4] failed total, KEYS[5] failed today, KEYS[6] target sorted set
#   (retry or dead; any key when ARGV[4] is ''), KEYS[7] the job's status key,
# KEYS[8] the job's attempts list, KEYS[9] its unique lock (any key when
#   ARGV[12] is ''), KEYS[10] its result key (any key when ARGV[15] is ''),
# KEYS[11] the key a result() waiter sets while it waits (keys.result_waiter)
# ARGV[1] payload as fetched, ARGV[2] 1 if the attempt failed, 0 if not,
#   '-' if it did not run (deferred by middleware: not counted at all),
# ARGV[3] TTL of the per-day counters (s), ARGV[4] '' | 'retry' | 'dead',
# ARGV[5] payload to store in the target, ARGV[6] its score,
# ARGV[7] dead set cap (jobs), ARGV[8] dead set cutoff score (older entries go),
# ARGV[9] new status ('' = status off: a status left with no TTL gets ARGV[11],
# EXPIRE_LEFT), ARGV[10] this attempt (JSON; '' = none),
# ARGV[11] status TTL (s), ARGV[12] '' | 'release' | 'extend' the unique lock
# (only if ARGV[13], the jid, holds it), ARGV[14] the lock's new TTL (extend),
# ARGV[15] the job's return value as JSON ('' = none: not complete, or it
# returned None), ARGV[16] the channel its end is published on ('' = none:
# it has not ended, or status is off), only while a waiter's key (KEYS[11])
# is set: one MGET for every job of the call, not a PUBLISH per job. The
# result shares the status's TTL (the job's result_ttl once it ended):
# results.py reads them together, and a waiter (its key set, subscribed,
# then reading) is woken by the message.
# Nothing is written unless the payload is still in the in-progress list: a
# job pushed back at a stop, recovered from a process presumed dead, or
# already recorded by the watchdog is in another place (or finished) now,
# and only the holder of an entry may record its outcome (SPEC §8, "one
# place at a time"). Recording it anyway left a job both in its queue and
# in the retry set. That is also all a call re-sent after a lost reply needs
# (outcome.record): if the first call ran, the entry is gone and the second
# records nothing.
# Every value in Redis may be corrupt (SPEC §8): the job is never removed
# from the in-progress list unless its outcome is stored. The one write its
# future depends on (ZADD into the retry or dead set) is checked before
# anything is written: when that set's key holds another type, nothing is
# done and its type is returned, and the caller puts the job where it can
# land (a retry into the dead set, with the reason; a death nowhere: it stays
# ours, logged). The rest cannot stop it: a counter that is not a number
# (INCRBY would raise, after the LREM, losing the job) starts over; an
# attempts list or unique lock of another type is replaced or left. LREM
# stays the first write: Redis never refuses it under OOM, and a script's
# later writes are then never refused either (see the module docstring).
# With two entries of the same bytes (a producer that retried its LPUSH),
# each call removes one: each copy is a fetch of its own (running.py).
# Returns 1 if the payload was still in the in-progress list, else 0; the
# target's type when it holds another type and the payload is still listed.
FINISH_BODY = (
    EXPIRE_LEFT
    + """
local function finish_one(K, A, counts, ttls, ends)
  if A[4] ~= '' then
    local held = redis.call('TYPE', K[6])['ok']
    if held ~= 'zset' and held ~= 'none' then
      if redis.call('LPOS', K[1], A[1]) then return held end
      return 0
    end
  end
  local removed = redis.call('LREM', K[1], 1, A[1])
  if removed == 0 then return 0 end
  if A[4] ~= '' then
    redis.call('ZADD', K[6], A[6], A[5])
    if A[4] == 'dead' then
      redis.call('ZREMRANGEBYSCORE', K[6], '-inf', '(' .. A[8])
      redis.call('ZREMRANGEBYRANK', K[6], 0, -tonumber(A[7]) - 1)
    end
  end
  local function tally(key, ttl)
    counts[key] = (counts[key] or 0) + 1
    if ttl then ttls[key] = ttl end
  end
  if A[2] ~= '-' then
    tally(K[2])
    tally(K[3], A[3])
  end
  if A[2] == '1' then
    tally(K[4])
    tally(K[5], A[3])
  end
  if A[9] ~= '' then
    redis.call('SET', K[7], A[9], 'EX', A[11])
    if A[10] ~= '' then
      if type(redis.pcall('RPUSH', K[8], A[10])) == 'table' then
        redis.call('DEL', K[8])
        redis.call('RPUSH', K[8], A[10])
      end
      redis.call('EXPIRE', K[8], A[11])
    end
    if A[15] ~= '' then redis.call('SET', K[10], A[15], 'EX', A[11]) end
    if A[16] ~= '' then ends[#ends + 1] = {K[11], A[16], A[9]} end
  else
    expire_left(K[7], A[11])
  end
  if A[12] ~= '' and redis.pcall('GET', K[9]) == A[13] then
    if A[12] == 'release' then
      redis.call('DEL', K[9])
    else
      redis.call('EXPIRE', K[9], A[14])
    end
  end
  return removed
end
-- The ends of the jobs recorded, published where a waiter's key is set
-- (read in one MGET: a key of another type reads as unset).
local function publish_ends(ends)
  if #ends == 0 then return end
  local waiter_keys = {}
  for i, e in ipairs(ends) do waiter_keys[i] = e[1] end
  local waiting = redis.call('MGET', unpack(waiter_keys))
  for i, e in ipairs(ends) do
    if waiting[i] then redis.call('PUBLISH', e[2], e[3]) end
  end
end
-- The counters of every job recorded, one INCRBY each: a counter that is
-- not a number starts over; a per-day one gets its TTL as it is made.
local function count_all(counts, ttls)
  for key, n in pairs(counts) do
    local total = redis.pcall('INCRBY', key, n)
    if type(total) == 'table' then
      redis.call('SET', key, n)
      total = n
    end
    if ttls[key] and total == n then redis.call('EXPIRE', key, ttls[key]) end
  end
end
"""
)
FINISH = (
    FINISH_BODY
    + """
local counts, ttls, ends = {}, {}, {}
local removed = finish_one(KEYS, ARGV, counts, ttls, ends)
count_all(counts, ttls)
publish_ends(ends)
return removed
"""
)

# FINISH_MANY: FINISH for several jobs in one call (the I/O core's round trip
# of acknowledgements, worker/core.py), each exactly as FINISH records it,
# with their counters added up and written once: one script call and one
# INCRBY per counter a round trip, not one each per job.
# KEYS: FINISH's 11 keys for each job in turn; ARGV: FINISH's 16 values for
# each job in turn (the same order).
# Returns FINISH's reply for each job, in order.
FINISH_MANY = (
    FINISH_BODY
    + """
local replies, counts, ttls, ends = {}, {}, {}, {}
for j = 0, #KEYS / 11 - 1 do
  replies[j + 1] = finish_one({unpack(KEYS, 11 * j + 1, 11 * j + 11)},
    {unpack(ARGV, 16 * j + 1, 16 * j + 16)}, counts, ttls, ends)
end
count_all(counts, ttls)
publish_ends(ends)
return replies
"""
)
FINISH_KEYS, FINISH_ARGS = 11, 16  # a job's share of FINISH_MANY's KEYS and ARGV


@frozen  # made for every job: frozen.py says why not @dataclass(frozen=True)
class Finish(ScriptCall):
    inprogress_key: str
    processed_key: str  # the counter of runs (of expired jobs, for one that expired)
    processed_day_key: str
    failed_key: str
    failed_day_key: str
    target_key: str  # retry or dead set (any key when target_kind is '')
    status_key: str
    attempts_key: str
    lock_key: str  # the unique lock (any key when lock_action is '')
    result_key: str  # the job's result (any key when result is b'')
    payload: bytes  # as fetched
    failed: str  # '1' | '0' | '-' (did not run)
    day_ttl: int
    target_kind: str  # '' | 'retry' | 'dead'
    stored: bytes  # the payload to store in the target
    score: float
    dead_cap: int
    dead_cutoff: float
    status: str  # '' = status off
    attempt: str  # JSON; '' = none
    status_ttl: int
    lock_action: str  # '' | 'release' | 'extend'
    jid: str
    lock_ttl: int
    result: bytes = b""  # the return value as JSON; b'' = none (results.py)
    ended_channel: str = ""  # published on when the job ended; '' = none
    waiter_key: str = "-"  # keys.result_waiter: publish only while it is set

    def keys(self) -> list[str]:
        return [
            self.inprogress_key,
            self.processed_key,
            self.processed_day_key,
            self.failed_key,
            self.failed_day_key,
            self.target_key,
            self.status_key,
            self.attempts_key,
            self.lock_key,
            self.result_key,
            self.waiter_key,
        ]

    def argv(self) -> list[Arg]:
        return [
            self.payload,
            self.failed,
            self.day_ttl,
            self.target_kind,
            self.stored,
            self.score,
            self.dead_cap,
            self.dead_cutoff,
            self.status,
            self.attempt,
            self.status_ttl,
            self.lock_action,
            self.jid,
            self.lock_ttl,
            self.result,
            self.ended_channel,
        ]


@dataclass(frozen=True)
class FinishMany(ScriptCall):
    """FINISH_MANY of FINISH calls already built: each one's keys and argv."""

    finishes: Sequence[tuple[Sequence[str], Sequence[Arg]]]

    def keys(self) -> list[str]:
        return [key for keys, _ in self.finishes for key in keys]

    def argv(self) -> list[Arg]:
        return [value for _, argv in self.finishes for value in argv]


# What a batch does when its counters move: fire a callback once, and decide
# whether the batch is complete (every job ran once or was skipped) or a
# success (every job succeeded). Shared by FINISH_STEP, BURY_STEP and
# BATCH_ADD (an empty batch is complete as soon as it is pushed). A callback
# is stored in the batch's hash as its queue, jid and payload without the
# closing brace (``on:NAME:queue|jid|head``): the payload is written whole
# when the batch is created, and only ``enqueued_at`` is added here, so
# nothing in it (a big integer argument, say) goes through Lua's number
# conversion.
# Every key is declared by the caller. A callback's queue list and status key
# come in ``targets`` ({complete = {queue key, status key}, success = ...,
# death = ...}): the batch's jobs carry their callbacks' queues and jids
# (``batch_on``, see workflows/batch.py) for that. The names built here from
# the prefixes are only compared with the declared keys, never touched: a
# callback whose keys the caller could not declare (a job pushed before its
# payload carried them) goes to the scheduled set (declared), due now, and
# the scheduled poller pushes it within a poll.
# ``via``: {queues = set of queue names, wakeup = wakeup channel prefix,
# ttl = status TTL (s), queue_prefix, status_prefix ('' = status off),
# scheduled = the scheduled set, dead = the dead set (nil in BATCH_ADD),
# now = unix time (JSON number text)}. Channels are not keys: the wakeup
# channel is built from its prefix.
# A queue key that holds another type (forged) would fail the LPUSH after the
# step's other writes, which Redis keeps: a chain's next step was then in no
# key at all. Such a job goes to the scheduled set instead, due at once,
# where the poller buries it with the reason (SPEC §8: it lands somewhere);
# and when the scheduled set holds another type too, straight to the dead
# set, with the reason in the payload (``park``). Only a job that none of the
# three takes raises (trapped by SETTLE_WORKFLOW, logged by Redis): BATCH_ADD,
# which has no dead set, refuses a forged scheduled set before any write.
BATCH_FUNCTIONS = """
local function takes(key, kind)
  local held = redis.call('TYPE', key)['ok']
  return held == kind or held == 'none', held
end
local function park(via, payload, score, status_key)
  local fits, held = takes(via.scheduled, 'zset')
  if fits then
    redis.call('ZADD', via.scheduled, score, payload)
    if status_key and via.status_prefix ~= '' then
      redis.call('SET', status_key, 'scheduled', 'EX', via.ttl)
    end
    return
  end
  local why = 'could not be queued: ' .. via.scheduled .. ' holds a ' .. held
  if via.dead and takes(via.dead, 'zset') then
    local entry = string.sub(payload, 1, -2) .. ',"dead_reason":' .. cjson.encode(why)
      .. ',"died_at":' .. via.now .. '}'
    redis.call('ZADD', via.dead, via.now, entry)
    if status_key and via.status_prefix ~= '' then
      redis.call('SET', status_key, 'dead', 'EX', via.ttl)
    end
    return
  end
  error('jobmaster: a job lands nowhere: ' .. why)
end
local function push_job(via, queue_key, status_key, queue, payload)
  if not takes(queue_key, 'list') then
    park(via, payload, 0, status_key)
    return
  end
  redis.call('LPUSH', queue_key, payload)
  redis.pcall('SADD', via.queues, queue)
  if via.status_prefix ~= '' then redis.call('SET', status_key, 'queued') end  -- no TTL
  redis.call('PUBLISH', via.wakeup .. queue, 1)
end
local function fire(batch, which, now, via, targets)
  if redis.call('HSETNX', batch, which .. '_at', now) == 0 then return end
  local cb = redis.call('HMGET', batch, 'on:' .. which .. ':queue', 'on:' .. which .. ':jid',
                        'on:' .. which .. ':head')
  if not (cb[1] and cb[2] and cb[3]) then return end
  local payload = cb[3] .. ',"enqueued_at":' .. now .. '}'
  local target = targets[which]
  if target[1] == via.queue_prefix .. cb[1]
      and (via.status_prefix == '' or target[2] == via.status_prefix .. cb[2]) then
    push_job(via, target[1], target[2], cb[1], payload)
  else
    park(via, payload, now, nil)
  end
end
local function settle(batch, failed, now, via, targets)
  local pending = tonumber(redis.call('HGET', batch, 'pending') or '0')
  if pending <= redis.call('SCARD', failed) then fire(batch, 'complete', now, via, targets) end
  if pending <= 0 and tonumber(redis.call('HGET', batch, 'skipped') or '0') == 0 then
    fire(batch, 'success', now, via, targets)
  end
end
"""


@dataclass(frozen=True)
class CallbackTargets:
    """The queue list and status key of a batch's on_complete, on_success and
    on_death callbacks (``targets`` above; any keys where none or unknown):
    the same six KEYS in BATCH_ADD and in the workflow part of FINISH_STEP and
    BURY_STEP."""

    complete: tuple[str, str]
    success: tuple[str, str]
    death: tuple[str, str]

    def keys(self) -> list[str]:
        return [*self.complete, *self.success, *self.death]


# The workflow part of FINISH_STEP and BURY_STEP: what a job's end does to
# its chain (push the next step, or the chain's on_failure) and its batch
# (counters, callbacks). ``k`` (14 keys): {set of queue names, the batch hash
# (any key without a batch), the batch's failed set, the chain hash (any key
# without a chain), the queue list and status key of the job pushed with it
# (any keys without one), the queue list and status key of the batch's
# on_complete, on_success and on_death callbacks (any keys where unknown, see
# BATCH_FUNCTIONS), the scheduled set, the dead set}. ``a``: {queue key prefix, wakeup
# channel prefix, status key prefix ('' = status off), batch event '' |
# 'succeeded' | 'failed' | 'dead' | 'skipped', now (unix time, JSON number
# text), chain event '' | 'next' | 'last' | 'failed', queue, jid and payload
# of the job to push with it (the chain's next step or its on_failure; ''
# for none), the failed set's TTL (s), the job's jid, status TTL (s)}.
WORKFLOW_FUNCTION = """
local function workflow_step(k, a)
  local via = {queues = k[1], wakeup = a[2], ttl = a[12], queue_prefix = a[1],
               status_prefix = a[3], scheduled = k[13], dead = k[14], now = a[5]}
  local targets = {complete = {k[7], k[8]}, success = {k[9], k[10]}, death = {k[11], k[12]}}
  local now, jid = a[5], a[11]
  local chain_event = a[6]
  if chain_event ~= '' and redis.call('EXISTS', k[4]) == 1 then
    if chain_event == 'failed' then
      redis.call('HSET', k[4], 'state', 'failed', 'failed_jid', jid, 'finished_at', now)
    else
      redis.call('HINCRBY', k[4], 'done', 1)
      if chain_event == 'last' then
        redis.call('HSET', k[4], 'state', 'succeeded', 'finished_at', now)
      else
        redis.call('HSET', k[4], 'current', a[8])
      end
    end
  end
  if a[9] ~= '' then push_job(via, k[5], k[6], a[7], a[9]) end
  local event = a[4]
  if event ~= '' and redis.call('EXISTS', k[2]) == 1 then
    if event == 'succeeded' or event == 'skipped' then
      redis.call('HINCRBY', k[2], event, 1)
      redis.call('HINCRBY', k[2], 'pending', -1)
      redis.call('SREM', k[3], jid)
    else
      redis.call('SADD', k[3], jid)
      redis.call('EXPIRE', k[3], a[10])
      if event == 'dead' then
        redis.call('HINCRBY', k[2], 'dead', 1)
        fire(k[2], 'death', now, via, targets)
      end
    end
    settle(k[2], k[3], now, via, targets)
  end
end
"""


@dataclass(frozen=True)
class WorkflowStep:
    """``k`` and ``a`` of ``workflow_step`` up to the failed set's TTL: the
    tail FINISH_STEP and BURY_STEP append to their own KEYS and ARGV."""

    queues_key: str
    batch_key: str  # any key without a batch
    batch_failed_key: str
    chain_key: str  # any key without a chain
    follow_queue_key: str  # the job pushed with it (any keys without one)
    follow_status_key: str
    callbacks: CallbackTargets
    scheduled_key: str
    dead_key: str
    queue_prefix: str
    wakeup_prefix: str
    status_prefix: str  # '' = status off
    batch_event: str  # '' | 'succeeded' | 'failed' | 'dead' | 'skipped'
    now: str  # unix time, JSON number text
    chain_event: str  # '' | 'next' | 'last' | 'failed'
    follow_queue: str
    follow_jid: str
    follow_payload: bytes
    failed_ttl: int

    def keys(self) -> list[str]:
        return [
            self.queues_key,
            self.batch_key,
            self.batch_failed_key,
            self.chain_key,
            self.follow_queue_key,
            self.follow_status_key,
            *self.callbacks.keys(),
            self.scheduled_key,
            self.dead_key,
        ]

    def argv(self) -> list[Arg]:
        return [
            self.queue_prefix,
            self.wakeup_prefix,
            self.status_prefix,
            self.batch_event,
            self.now,
            self.chain_event,
            self.follow_queue,
            self.follow_jid,
            self.follow_payload,
            self.failed_ttl,
        ]


# How FINISH_STEP and BURY_STEP call ``workflow_step``: after the job has left
# the in-progress list and its outcome is stored, a batch or chain hash that
# someone corrupted (a ``pending`` that is not a number, a hash of another
# type) must not fail the script, since Redis keeps the writes made before a
# failure: the job would be acknowledged with its step half done, or (before
# the outcome was stored first) lost. The step is trapped instead, and the
# failure is written to Redis's own log.
SETTLE_WORKFLOW = """
local function settle_workflow(k, a)
  local ok, err = pcall(workflow_step, k, a)
  if not ok then
    redis.log(redis.LOG_WARNING, 'jobmaster: workflow step of jid ' .. tostring(a[11]) ..
      ' not completed: ' .. tostring(err))
  end
end
"""

# FINISH_STEP: FINISH for a job in a batch or a chain, with the workflow's
# step in the same atomic step: a chain's next job is pushed only with its
# predecessor's success, and a batch's counters move with the outcome, so a
# callback can neither be missed nor fired twice (two children finishing the
# last two jobs at once are serialised by Redis). Only the call that removed
# the payload from the in-progress list moves the workflow: a job requeued
# from under us (a recovered orphan) runs again and is counted then.
# KEYS and ARGV as FINISH (KEYS[1..11], ARGV[1..16], the result and the
# channel always given), then the workflow part's ``k`` (the last 14 KEYS)
# and ``a`` (the last 10 ARGV; WORKFLOW_FUNCTION), less the jid (ARGV[13])
# and status TTL (ARGV[11]), which FINISH has already. Counted from the end,
# so that FINISH may grow without renumbering them. Built by FinishStep: a
# Finish, then a WorkflowStep.
# Returns as FINISH.
FINISH_STEP = (
    FINISH_BODY
    + BATCH_FUNCTIONS
    + WORKFLOW_FUNCTION
    + SETTLE_WORKFLOW
    + """
local counts, ttls, ends = {}, {}, {}
local removed = finish_one(KEYS, ARGV, counts, ttls, ends)
count_all(counts, ttls)
publish_ends(ends)
if removed ~= 1 then return removed end
local step_args = {unpack(ARGV, #ARGV - 9)}
step_args[11], step_args[12] = ARGV[13], ARGV[11]
settle_workflow({unpack(KEYS, #KEYS - 13)}, step_args)
return 1
"""
)


@dataclass(frozen=True)
class FinishStep(ScriptCall):
    finish: Finish
    step: WorkflowStep

    def keys(self) -> list[str]:
        return [*self.finish.keys(), *self.step.keys()]

    def argv(self) -> list[Arg]:
        return [*self.finish.argv(), *self.step.argv()]


# BATCH_ADD: create a batch (first call) and push jobs into it, as one step:
# the batch's counters grow with its jobs, so no callback can fire while
# some of the jobs of one ``with b.jobs():`` block are not pushed yet.
# KEYS[1] the batch hash, KEYS[2] its failed set, KEYS[3] the batches index,
# KEYS[4] set of queue names, KEYS[5] the scheduled set, KEYS[6..11] the queue
# list and status key of the on_complete, on_success and on_death callbacks
# (any keys where none or unknown: see BATCH_FUNCTIONS), then for each job, in
# the order of ARGV's quadruples, its queue list and its status key (any key
# when status is off)
# ARGV[1] batch id, ARGV[2] now (JSON number text), ARGV[3] the batch's TTL
# (s), ARGV[4] queue key prefix, ARGV[5] wakeup channel prefix, ARGV[6]
# status key prefix ('' = status off), ARGV[7] status TTL (s: a scheduled
# job's status gets its wait more), ARGV[8] n: the
# number of hash fields set when the batch is created, ARGV[9 .. 8+2n] those
# field/value pairs, then quadruples: queue, due time (0 = now; else the job
# goes to the scheduled set, where its payload is complete), jid, payload.
# Returns the batch's pending count. A scheduled set of another type (forged)
# fails it whole, before any write, with an error naming the key: a job or
# callback whose queue refuses it waits there, and a producer has no dead set
# to fall back on (BATCH_FUNCTIONS).
BATCH_ADD = (
    BATCH_FUNCTIONS
    + """
local fits, held = takes(KEYS[5], 'zset')
if not fits then
  return redis.error_reply('WRONGTYPE ' .. KEYS[5] .. ' holds a ' .. held .. ': nothing pushed')
end
local via = {queues = KEYS[4], wakeup = ARGV[5], ttl = ARGV[7], queue_prefix = ARGV[4],
             status_prefix = ARGV[6], scheduled = KEYS[5], now = ARGV[2]}
local targets = {complete = {KEYS[6], KEYS[7]}, success = {KEYS[8], KEYS[9]},
                 death = {KEYS[10], KEYS[11]}}
local fields = tonumber(ARGV[8])
if redis.call('EXISTS', KEYS[1]) == 0 then
  for i = 9, 8 + 2 * fields, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', KEYS[1], 'created_at', ARGV[2], 'total', 0, 'pending', 0)
  redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
end
local added, first = 0, 9 + 2 * fields
for i = first, #ARGV, 4 do
  local queue_key, status_key = KEYS[12 + (i - first) / 2], KEYS[13 + (i - first) / 2]
  if tonumber(ARGV[i + 1]) > 0 then
    redis.call('ZADD', KEYS[5], ARGV[i + 1], ARGV[i + 3])
    if via.status_prefix ~= '' then  -- through its wait, then the status TTL (SPEC §11)
      local wait = math.max(0, math.ceil(tonumber(ARGV[i + 1]) - tonumber(ARGV[2])))
      redis.call('SET', status_key, 'scheduled', 'EX', tonumber(via.ttl) + wait)
    end
  else
    push_job(via, queue_key, status_key, ARGV[i], ARGV[i + 3])
  end
  added = added + 1
end
redis.call('HINCRBY', KEYS[1], 'total', added)
local pending = redis.call('HINCRBY', KEYS[1], 'pending', added)
redis.call('EXPIRE', KEYS[1], ARGV[3])
settle(KEYS[1], KEYS[2], ARGV[2], via, targets)
return pending
"""
)


@dataclass(frozen=True)
class BatchJob:
    """One job of a BATCH_ADD: a quadruple of ARGV, a pair of KEYS."""

    queue: str
    due: float  # 0 = now
    jid: str
    payload: bytes
    queue_key: str
    status_key: str  # any key when status is off


@dataclass(frozen=True)
class BatchAdd(ScriptCall):
    batch_key: str
    failed_key: str
    batches_key: str
    queues_key: str
    scheduled_key: str
    callbacks: CallbackTargets
    bid: str
    now: str  # JSON number text
    batch_ttl: int
    queue_prefix: str
    wakeup_prefix: str
    status_prefix: str  # '' = status off
    status_ttl: int
    fields: Mapping[str, Any]  # set when the batch is created
    jobs: Sequence[BatchJob]

    def keys(self) -> list[str]:
        head = [
            self.batch_key,
            self.failed_key,
            self.batches_key,
            self.queues_key,
            self.scheduled_key,
            *self.callbacks.keys(),
        ]
        return head + [key for job in self.jobs for key in (job.queue_key, job.status_key)]

    def argv(self) -> list[Arg]:
        head: list[Arg] = [
            self.bid,
            self.now,
            self.batch_ttl,
            self.queue_prefix,
            self.wakeup_prefix,
            self.status_prefix,
            self.status_ttl,
            len(self.fields),
        ]
        for name, value in self.fields.items():
            head += [name, value]
        for job in self.jobs:
            head += [job.queue, job.due, job.jid, job.payload]
        return head


# TRANSFER: move one entry out of a list or sorted set into a queue (front or
# back) or a sorted set, only if it is still in its source. "Only if still
# there" is what lets two recoverers (or a recoverer and a late ack) race
# without running a job twice or losing it.
# It lands the entry or leaves it where it was (SPEC §8): Redis keeps a
# script's writes made before a command fails, so when the target holds
# another type (a forged ``SET <ns>:queue:weird x``, and a payload naming
# that queue) the push must not come after the removal, or the entry is in
# no key at all. The target's type is checked first, and nothing is written
# when it is wrong; the caller decides where the entry goes instead
# (recovery.py: the dead set, with the reason). The set of queue names only
# lists queues: a forged one is passed over, never a failed move. The removal
# stays the first write (see the module docstring on OOM): TYPE, LPOS and
# ZSCORE only read.
# KEYS[1] source, KEYS[2] target, KEYS[3] set of queue names,
# KEYS[4] the job's status key (given a TTL if it has none when ARGV[10] is ''
#   and the target is a sorted set: EXPIRE_LEFT)
# ARGV[1] source kind 'list' | 'zset', ARGV[2] entry as stored in the source,
# ARGV[3] entry to store in the target, ARGV[4] target kind:
#   'front' (next to be fetched) | 'back' (queue's end) | 'zset',
# ARGV[5] score (zset target), ARGV[6] queue name (list target),
# ARGV[7] wakeup channel ('' for none), ARGV[8] sorted set cap (0 = none),
# ARGV[9] sorted set cutoff score (entries below it go; '-inf' for none),
# ARGV[10] the job's new status ('' = leave it), ARGV[11] status TTL (s; none
# into a queue: module docstring)
# Returns 1 if moved, 0 if the entry was no longer in the source, or the
# target's type ('string', 'hash'...) when it holds another type than the
# move needs (nothing done; the entry is still in its source).
TRANSFER_BODY = (
    EXPIRE_LEFT
    + """
local held = redis.call('TYPE', KEYS[2])['ok']
if held ~= 'none' and held ~= (ARGV[4] == 'zset' and 'zset' or 'list') then
  local there
  if ARGV[1] == 'list' then
    there = redis.call('LPOS', KEYS[1], ARGV[2])
  else
    there = redis.call('ZSCORE', KEYS[1], ARGV[2])
  end
  if not there then return 0 end
  return held
end
local removed
if ARGV[1] == 'list' then
  removed = redis.call('LREM', KEYS[1], 1, ARGV[2])
else
  removed = redis.call('ZREM', KEYS[1], ARGV[2])
end
if removed == 0 then return 0 end
if ARGV[4] == 'zset' then
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[9])
  if tonumber(ARGV[8]) > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[8]) - 1)
  end
else
  if ARGV[4] == 'front' then
    redis.call('RPUSH', KEYS[2], ARGV[3])
  else
    redis.call('LPUSH', KEYS[2], ARGV[3])
  end
  redis.pcall('SADD', KEYS[3], ARGV[6])
  if ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[7], 1) end
end
if ARGV[10] ~= '' then
  if ARGV[4] == 'zset' then
    redis.call('SET', KEYS[4], ARGV[10], 'EX', ARGV[11])
  else  -- into a queue: no TTL while it waits (module docstring)
    redis.call('SET', KEYS[4], ARGV[10])
  end
elseif ARGV[4] == 'zset' then
  expire_left(KEYS[4], ARGV[11])
end
"""
)
TRANSFER = TRANSFER_BODY + "return 1\n"


@dataclass(frozen=True)
class Transfer(ScriptCall):
    source_key: str
    target_key: str
    queues_key: str
    status_key: str
    source_kind: str  # 'list' | 'zset'
    entry: bytes  # as stored in the source
    stored: bytes  # to store in the target
    target_kind: str  # 'front' | 'back' | 'zset'
    score: float
    queue: str
    wakeup_channel: str  # '' for none
    cap: int  # 0 = none
    cutoff: float | str  # '-inf' for none
    status: str  # '' = leave it
    status_ttl: int

    def keys(self) -> list[str]:
        return [self.source_key, self.target_key, self.queues_key, self.status_key]

    def argv(self) -> list[Arg]:
        return [
            self.source_kind,
            self.entry,
            self.stored,
            self.target_kind,
            self.score,
            self.queue,
            self.wakeup_channel,
            self.cap,
            self.cutoff,
            self.status,
            self.status_ttl,
        ]


# BURY: TRANSFER of a job to the dead set by recovery (a poison pill, or an
# entry that is not a valid payload), with what its burial entails, in the
# same step: its unique lock released (it will not run again) and its
# on_failure hook job pushed (failure_hook.py: only a worker may run it). As three
# round trips, a crash between them left the lock held until its TTL (no
# such job could be enqueued) or the hook never run.
# KEYS[1..4] and ARGV[1..11] as TRANSFER (target the dead set, ARGV[4]
# 'zset'; Bury holds a Transfer), then KEYS[5] the job's unique lock (any
# key when ARGV[12] is ''), KEYS[6] the hook job's queue list (any key when
# ARGV[13] is '')
# ARGV[12] the jid whose lock to release ('' = none; released only if that
# jid holds it), ARGV[13] the hook job's payload ('' = none), ARGV[14] its
# queue name, ARGV[15] its wakeup channel, ARGV[16] the channel the job's end
# is published on ('' = none; the message is its status, ARGV[10]): a
# ``jobmaster.result`` waiting on a poison pill wakes with it (results.py)
# Returns 1 if moved, 0 if the entry was no longer in the source (then
# nothing else is done either: whoever moved it owns it), the dead set's type
# when it holds another type (nothing done, as TRANSFER), or 2 if moved but
# the hook job's queue holds another type: the hook is not queued (the
# caller logs it), since a failing push after the burial would fail the
# script with the burial half done. A forged lock of another type is left.
BURY_TAIL = """
local buried = 1
if ARGV[12] ~= '' and redis.pcall('GET', KEYS[5]) == ARGV[12] then
  redis.call('DEL', KEYS[5])
end
if ARGV[13] ~= '' then
  local hook_queue = redis.call('TYPE', KEYS[6])['ok']
  if hook_queue == 'list' or hook_queue == 'none' then
    redis.call('LPUSH', KEYS[6], ARGV[13])
    redis.pcall('SADD', KEYS[3], ARGV[14])
    redis.call('PUBLISH', ARGV[15], 1)
  else
    buried = 2
  end
end
if ARGV[16] ~= '' then redis.call('PUBLISH', ARGV[16], ARGV[10]) end
"""
BURY = TRANSFER_BODY + BURY_TAIL + "return buried\n"


@dataclass(frozen=True)
class Bury(ScriptCall):
    transfer: Transfer
    lock_key: str  # any key when unlock_jid is ''
    hook_queue_key: str  # any key when hook_payload is ''
    unlock_jid: str  # '' = none
    hook_payload: bytes  # b'' = none
    hook_queue: str
    hook_channel: str
    ended_channel: str = ""  # '' = none

    def keys(self) -> list[str]:
        return [*self.transfer.keys(), self.lock_key, self.hook_queue_key]

    def argv(self) -> list[Arg]:
        return [
            *self.transfer.argv(),
            self.unlock_jid,
            self.hook_payload,
            self.hook_queue,
            self.hook_channel,
            self.ended_channel,
        ]


# BURY_STEP: BURY of a batch or chain job, with the workflow's step: the
# batch counts the death (and may complete), the chain stops. Without it such
# a batch would never complete.
# KEYS[1..6] and ARGV[1..16] as BURY, then KEYS[7..20] and ARGV[17..26] the
# workflow part's ``k`` and ``a`` (WORKFLOW_FUNCTION) up to the failed set's
# TTL, and ARGV[27] the job's jid. Built by BuryStep: a Bury, then a
# WorkflowStep, then the jid.
# Returns as BURY.
BURY_STEP = (
    TRANSFER_BODY
    + BURY_TAIL
    + BATCH_FUNCTIONS
    + WORKFLOW_FUNCTION
    + SETTLE_WORKFLOW
    + """
local step_args = {unpack(ARGV, 17, 27)}
step_args[12] = ARGV[11]
settle_workflow({unpack(KEYS, 7, 20)}, step_args)
return buried
"""
)


@dataclass(frozen=True)
class BuryStep(ScriptCall):
    bury: Bury
    step: WorkflowStep
    jid: str

    def keys(self) -> list[str]:
        return [*self.bury.keys(), *self.step.keys()]

    def argv(self) -> list[Arg]:
        return [*self.bury.argv(), *self.step.argv(), self.jid]


# PERIODIC: claim slots of one periodic entry and enqueue a job for each one
# claimed, in one step: any number of masters may tick the same entry, and a
# slot is enqueued only by the first, because a slot is claimed only if it is
# newer than the entry's stored last slot, which it then becomes.
# A unique entry (ARGV[5] > 0) enqueues a slot only if it can take the
# entry's unique lock (the previous run is done); its slots are claimed
# either way, so a slot skipped for that reason is not enqueued later.
# KEYS[1] hash of entry name -> last slot, KEYS[2] queue list,
# KEYS[3] set of queue names, KEYS[4] the unique lock (any key if not unique),
# KEYS[5..] each payload's status key, in triple order (none when ARGV[4] is 0)
# ARGV[1] entry name, ARGV[2] queue name, ARGV[3] wakeup channel,
# ARGV[4] status on (> 0; queued: no TTL), ARGV[5] unique lock TTL (s, 0 = not unique),
# ARGV[6..] triples of slot (unix time), payload and jid, oldest slot first
# Returns the number of payloads pushed, or the queue key's type when it
# holds another type than a list (forged): then nothing is done, no slot
# claimed and no lock taken (a lock taken before a failing LPUSH was held with
# no job), and the caller logs it; the entry's other ticks go on.
PERIODIC = """
local held = redis.call('TYPE', KEYS[2])['ok']
if held ~= 'list' and held ~= 'none' then return held end
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1])) or -math.huge
local pushed, newest = 0, nil
for i = 6, #ARGV, 3 do
  if tonumber(ARGV[i]) > last then
    newest = ARGV[i]
    if tonumber(ARGV[5]) == 0
        or redis.call('SET', KEYS[4], ARGV[i + 2], 'NX', 'EX', ARGV[5]) then
      redis.call('LPUSH', KEYS[2], ARGV[i + 1])
      if tonumber(ARGV[4]) > 0 then  -- no TTL while it waits (module docstring)
        redis.call('SET', KEYS[5 + (i - 6) / 3], 'queued')
      end
      pushed = pushed + 1
    end
  end
end
if newest then redis.call('HSET', KEYS[1], ARGV[1], newest) end
if pushed > 0 then
  redis.pcall('SADD', KEYS[3], ARGV[2])
  redis.call('PUBLISH', ARGV[3], pushed)
end
return pushed
"""


@dataclass(frozen=True)
class PeriodicSlot:
    """One slot of a PERIODIC: a triple of ARGV and its status key."""

    slot: str  # unix time, as text
    payload: bytes
    jid: str
    status_key: str


@dataclass(frozen=True)
class Periodic(ScriptCall):
    last_key: str
    queue_key: str
    queues_key: str
    lock_key: str  # any key if not unique
    entry: str
    queue: str
    wakeup_channel: str
    status_ttl: int  # 0 = off
    lock_ttl: int  # 0 = not unique
    slots: Sequence[PeriodicSlot]  # oldest first

    def keys(self) -> list[str]:
        head = [self.last_key, self.queue_key, self.queues_key, self.lock_key]
        return head + [slot.status_key for slot in self.slots]

    def argv(self) -> list[Arg]:
        head: list[Arg] = [
            self.entry,
            self.queue,
            self.wakeup_channel,
            self.status_ttl,
            self.lock_ttl,
        ]
        return head + [v for s in self.slots for v in (s.slot, s.payload, s.jid)]


# PUSH_UNIQUE: enqueue (or schedule) one unique job only if no job holds its
# lock, taking the lock in the same step: two producers racing cannot both
# enqueue it.
# KEYS[1] the unique lock, KEYS[2] queue list or scheduled set,
# KEYS[3] set of queue names, KEYS[4] the job's status key
# ARGV[1] jid, ARGV[2] lock TTL (s), ARGV[3] payload, ARGV[4] 'queue' | 'zset',
# ARGV[5] score (zset), ARGV[6] queue name, ARGV[7] wakeup channel,
# ARGV[8] status TTL (s, 0 = off; a queued one gets none: module docstring)
# Returns 1 if enqueued, 0 if a job already holds the lock. A target that
# holds another type (forged) fails it whole, before the lock is taken, with
# an error naming the key: a lock taken before a failing push was held, with
# no job, until its TTL.
PUSH_UNIQUE = """
local held = redis.call('TYPE', KEYS[2])['ok']
if held ~= 'none' and held ~= (ARGV[4] == 'zset' and 'zset' or 'list') then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2] .. ' holds a ' .. held .. ': nothing pushed')
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 0 end
if ARGV[4] == 'zset' then
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[3])
  if tonumber(ARGV[8]) > 0 then redis.call('SET', KEYS[4], 'scheduled', 'EX', ARGV[8]) end
else
  redis.call('LPUSH', KEYS[2], ARGV[3])
  redis.pcall('SADD', KEYS[3], ARGV[6])
  if tonumber(ARGV[8]) > 0 then redis.call('SET', KEYS[4], 'queued') end  -- no TTL
  redis.call('PUBLISH', ARGV[7], 1)
end
return 1
"""


@dataclass(frozen=True)
class PushUnique(ScriptCall):
    lock_key: str
    target_key: str  # queue list or scheduled set
    queues_key: str
    status_key: str
    jid: str
    lock_ttl: int
    payload: bytes
    target_kind: str  # 'queue' | 'zset'
    score: float
    queue: str
    wakeup_channel: str
    status_ttl: int  # 0 = off

    def keys(self) -> list[str]:
        return [self.lock_key, self.target_key, self.queues_key, self.status_key]

    def argv(self) -> list[Arg]:
        return [
            self.jid,
            self.lock_ttl,
            self.payload,
            self.target_kind,
            self.score,
            self.queue,
            self.wakeup_channel,
            self.status_ttl,
        ]


# UNLOCK: release a unique job's lock, or extend it, only if this job holds it
# (a lock that expired and was taken by a newer job is not ours to touch).
# KEYS[1] the unique lock
# ARGV[1] jid, ARGV[2] 'release' | 'extend', ARGV[3] new TTL (s, for extend)
# Returns 1 if the lock was ours.
UNLOCK = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == 'release' then
  redis.call('DEL', KEYS[1])
else
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 1
"""


@dataclass(frozen=True)
class Unlock(ScriptCall):
    lock_key: str
    jid: str
    action: str = "release"  # 'release' | 'extend'
    ttl: int = 0  # extend only

    def keys(self) -> list[str]:
        return [self.lock_key]

    def argv(self) -> list[Arg]:
        return [self.jid, self.action, self.ttl]


# RATE_COUNT: count one start in a rate limiter's window (middleware/rate_limit.py);
# the window's counter expires on its own once the window is over.
# KEYS[1] the window's counter; ARGV[1] its TTL (s)
# Returns the count so far.
RATE_COUNT = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return count
"""


@dataclass(frozen=True)
class RateCount(ScriptCall):
    counter_key: str
    ttl: int

    def keys(self) -> list[str]:
        return [self.counter_key]

    def argv(self) -> list[Arg]:
        return [self.ttl]


# BATCH_CANCEL: mark a batch cancelled, only if it exists (a mistyped id must
# not create an empty batch). Its jobs not yet started are skipped as fetched.
# KEYS[1] the batch hash; ARGV[1] now (unix time)
# Returns 1 if the batch exists, else 0.
BATCH_CANCEL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSETNX', KEYS[1], 'cancelled', ARGV[1])
return 1
"""


@dataclass(frozen=True)
class BatchCancel(ScriptCall):
    batch_key: str
    now: str

    def keys(self) -> list[str]:
        return [self.batch_key]

    def argv(self) -> list[Arg]:
        return [self.now]


# PEEK: read a page of a sorted set with each member cut to its first
# ARGV[6] bytes, and its full length: a forged 100 MB entry costs a listing
# (the CLI, the dashboard) that many bytes, not the entry (records.py).
# Read-only. The member is still copied into Lua, in Redis, for a moment.
# KEYS[1] the sorted set
# ARGV[1] min, ARGV[2] max (ranks; scores with BYSCORE), ARGV[3] "BYSCORE" or
# "", ARGV[4] "REV" or "", ARGV[5] LIMIT count (BYSCORE only), ARGV[6] bytes
# kept; with BYSCORE, ARGV[7] LIMIT offset
# Returns {member's first bytes, its length, score, ...} in ZRANGE's order.
PEEK = """
local args = {KEYS[1], ARGV[1], ARGV[2]}
if ARGV[3] ~= '' then args[#args + 1] = ARGV[3] end
if ARGV[4] ~= '' then args[#args + 1] = ARGV[4] end
if ARGV[3] ~= '' then
  args[#args + 1] = 'LIMIT'
  args[#args + 1] = ARGV[7]
  args[#args + 1] = ARGV[5]
end
args[#args + 1] = 'WITHSCORES'
local found = redis.call('ZRANGE', unpack(args))
local keep = tonumber(ARGV[6])
local out = {}
for i = 1, #found, 2 do
  out[#out + 1] = string.sub(found[i], 1, keep)
  out[#out + 1] = #found[i]
  out[#out + 1] = found[i + 1]
end
return out
"""


@dataclass(frozen=True)
class Peek(ScriptCall):
    key: str
    low: float | str  # min (max with by_score and rev)
    high: float | str
    by_score: bool
    rev: bool
    count: int  # LIMIT count (by_score only)
    keep: int  # bytes kept
    offset: int  # LIMIT offset (by_score only)

    def keys(self) -> list[str]:
        return [self.key]

    def argv(self) -> list[Arg]:
        return [
            self.low,
            self.high,
            "BYSCORE" if self.by_score else "",
            "REV" if self.rev else "",
            self.count,
            self.keep,
            self.offset,
        ]


# PEEK_LIST: PEEK for a list (a queue): LRANGE with each entry cut to its
# first ARGV[3] bytes, and its full length. Read-only.
# KEYS[1] the list; ARGV[1] start, ARGV[2] stop (LRANGE's), ARGV[3] bytes kept
# Returns {entry's first bytes, its length, ...} in LRANGE's order.
# Entries cut to their first ``keep`` bytes, each with its full length
# beside it: {first bytes, length, ...} (PEEK_LIST, POP_OLDEST).
CUT_ENTRIES = """
local function cut(found, keep)
  local out = {}
  for i = 1, #found do
    out[#out + 1] = string.sub(found[i], 1, keep)
    out[#out + 1] = #found[i]
  end
  return out
end
"""
PEEK_LIST = (
    CUT_ENTRIES
    + """
return cut(redis.call('LRANGE', KEYS[1], ARGV[1], ARGV[2]), tonumber(ARGV[3]))
"""
)


@dataclass(frozen=True)
class PeekList(ScriptCall):
    key: str
    start: int
    stop: int
    keep: int  # bytes kept

    def keys(self) -> list[str]:
        return [self.key]

    def argv(self) -> list[Arg]:
        return [self.start, self.stop, self.keep]


# POP_OLDEST: take up to ARGV[1] entries off a queue's fetch end (the oldest),
# each cut to its first ARGV[2] bytes with its full length, as PEEK_LIST
# reads them: a queue being cleared a page at a time (``Queue.clear``), so
# that the statuses of what it drops can be given a TTL (EXPIRE_WAITING)
# without a forged 100 MB entry crossing the wire. A key that is not a list
# (forged) holds no job: nothing is taken.
# KEYS[1] the queue list
# ARGV[1] the most entries to take, ARGV[2] bytes kept of each
# Returns {entry's first bytes, its length, ...}, oldest first; {} when empty.
POP_OLDEST = (
    CUT_ENTRIES
    + """
if redis.call('TYPE', KEYS[1])['ok'] ~= 'list' then return {} end
return cut(redis.call('RPOP', KEYS[1], ARGV[1]) or {}, tonumber(ARGV[2]))
"""
)


@dataclass(frozen=True)
class PopOldest(ScriptCall):
    queue_key: str
    most: int
    keep: int  # bytes kept

    def keys(self) -> list[str]:
        return [self.queue_key]

    def argv(self) -> list[Arg]:
        return [self.most, self.keep]


# EXPIRE_WAITING: give a TTL to the statuses, among KEYS, that have none: the
# "queued" statuses of jobs dropped from a queue without an outcome (a delete,
# a clear; see the module docstring). A status that has a TTL already (the
# job ended, or waits in a set) keeps it. ``EXPIRE NX`` does this from Redis
# 7.0; 6.2 is still served.
# KEYS[1..] status keys
# ARGV[1] the TTL (s)
# Returns how many were given one.
EXPIRE_WAITING = """
local given = 0
for i = 1, #KEYS do
  if redis.call('TTL', KEYS[i]) == -1 then
    redis.call('EXPIRE', KEYS[i], ARGV[1])
    given = given + 1
  end
end
return given
"""


@dataclass(frozen=True)
class ExpireWaiting(ScriptCall):
    status_keys: Sequence[str]
    ttl: int  # seconds

    def keys(self) -> list[str]:
        return list(self.status_keys)

    def argv(self) -> list[Arg]:
        return [self.ttl]


# CONTROL_POP: take the oldest remote commands of one process's control list,
# each cut to its first ARGV[2] bytes with its real length beside it, so a
# forged 200 MB entry never crosses the wire or reaches a log (control.py).
# A key that is not a list (forged) is deleted, or the control list would
# fail every heartbeat's transaction from then on.
# KEYS[1] the control list
# ARGV[1] the most entries to take, ARGV[2] the bytes kept of each
# Returns {length, head, length, head, ...}; {-1, type} for a key that was
# not a list; {} when there is nothing.
CONTROL_POP = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'list' then
  if kind == 'none' then return {} end
  redis.call('DEL', KEYS[1])
  return {-1, kind}
end
local out, keep = {}, tonumber(ARGV[2])
for _ = 1, tonumber(ARGV[1]) do
  local entry = redis.call('LPOP', KEYS[1])
  if not entry then break end
  out[#out + 1] = #entry
  out[#out + 1] = string.sub(entry, 1, keep)
end
return out
"""


@dataclass(frozen=True)
class ControlPop(ScriptCall):
    key: str
    most: int
    keep: int  # bytes kept of each

    def keys(self) -> list[str]:
        return [self.key]

    def argv(self) -> list[Arg]:
        return [self.most, self.keep]


# QUEUE_ENDS: for /metrics, each queue's length and the two ends of its
# oldest entry (the tail of the list), never the whole entry: a 100 MB job
# at a queue's tail, read whole by every scrape, stalled a master 2.2 s and
# grew it to 714 MB. ``enqueued_at`` is the last field a producer writes
# (client.py), so it is in the end piece; the head holds it in payloads
# rewritten since. A key that is not a list counts as an empty queue.
# KEYS[1..] queue lists
# ARGV[1] the bytes kept of each end
# Returns {length, oldest entry's size (-1: none), head, tail} per queue, in
# KEYS order; head is the whole entry when it is at most 2 * ARGV[1] bytes
# (tail is then '').
QUEUE_ENDS = """
local out, keep = {}, tonumber(ARGV[1])
for i = 1, #KEYS do
  local size, head, tail, length = -1, '', '', 0
  if redis.call('TYPE', KEYS[i])['ok'] == 'list' then
    length = redis.call('LLEN', KEYS[i])
    local oldest = redis.call('LINDEX', KEYS[i], -1)
    if oldest then
      size = #oldest
      if size <= 2 * keep then
        head = oldest
      else
        head, tail = string.sub(oldest, 1, keep), string.sub(oldest, -keep)
      end
    end
  end
  out[#out + 1] = length
  out[#out + 1] = size
  out[#out + 1] = head
  out[#out + 1] = tail
end
return out
"""


@dataclass(frozen=True)
class QueueEnds(ScriptCall):
    queue_keys: Sequence[str]
    keep: int  # bytes kept of each end

    def keys(self) -> list[str]:
        return list(self.queue_keys)

    def argv(self) -> list[Arg]:
        return [self.keep]


# CANCEL_REQUEST: record that ``jobmaster.cancel`` asked for a job to stop,
# only if its status says it has not ended (queued, scheduled, retrying,
# working): the check and the write are one step, so a job that ends as we
# look is never told it "will not run" when it already ran. The request is a
# member of the cancels set scored by Redis's own clock (no skew between the
# hosts whose workers read it), and its jid is published on the cancel
# channel, which every worker process hears at once (the set is what a
# process that missed the message reads). The set is trimmed by age, then of
# members scored in the future (no genuine request is: they are forged, and
# kept they would outrank every genuine one), then by count, oldest first: a
# flood of requests costs a bounded set, not Redis's memory, and the newest
# genuine request is always kept. A cancels key of another type (forged) is
# replaced: else every cancel, and every worker's read of it, would fail
# from then on.
# KEYS[1] the job's status key, KEYS[2] the cancels set, KEYS[3] the
# cancelled total (counts each job once, at its first request)
# ARGV[1] jid, ARGV[2] seconds a request is kept, ARGV[3] most requests kept,
# ARGV[4] seconds ahead of Redis's clock past which a score is forged,
# ARGV[5] the cancel channel
# Returns {status ('' when none or not a string), 1 if the request was
# recorded now, 0 if not (ended, unknown, or asked before)}.
CANCEL_REQUEST = """
local status = redis.pcall('GET', KEYS[1])
if type(status) ~= 'string' then return {'', 0} end
local live = {queued = true, scheduled = true, retrying = true, working = true}
if not live[status] then return {status, 0} end
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'zset' and kind ~= 'none' then redis.call('DEL', KEYS[2]) end
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local added = redis.call('ZADD', KEYS[2], 'NX', now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - tonumber(ARGV[2])))
redis.call('ZREMRANGEBYSCORE', KEYS[2], '(' .. (now + tonumber(ARGV[4])), '+inf')
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[3]) - 1)
if added == 1 and type(redis.pcall('INCR', KEYS[3])) == 'table' then
  redis.call('SET', KEYS[3], 1)
end
redis.call('PUBLISH', ARGV[5], ARGV[1])
return {status, added}
"""


@dataclass(frozen=True)
class CancelRequest(ScriptCall):
    status_key: str
    cancels_key: str
    cancelled_key: str  # the cancelled total
    jid: str
    keep_for: int  # seconds a request is kept
    most: int  # requests kept
    future: float  # seconds ahead of Redis's clock past which a score is forged
    channel: str  # the cancel channel

    def keys(self) -> list[str]:
        return [self.status_key, self.cancels_key, self.cancelled_key]

    def argv(self) -> list[Arg]:
        return [self.jid, self.keep_for, self.most, self.future, self.channel]


# FIND_QUEUED: look for a job's entry in one page of a queue, inside Redis:
# only the entry found crosses the wire, not the page (a queue may hold a
# million jobs). Pages go from the left (the newest end), as Queue.__iter__
# explains: a fetch from the right shifts nothing, a push only makes the
# walk see an entry twice, so an entry that stays queued is never skipped.
# An entry is the job's when it holds the jid and decodes to an object whose
# ``jid`` it is (an argument that mentions the jid is no match); one cjson
# cannot decode is matched by its ``"jid":"<jid>"`` text. A key that is not
# a list (forged) holds no job. Read-only.
# With a byte cap (ARGV[4] > 0: a job's page, which shows the entry, not
# cancel, which needs it whole to remove it), an entry over the cap is
# matched by its text only (never decoded) and only its first bytes are
# returned: a forged 100 MB entry costs the page that many bytes, not the
# entry (it is still copied into Lua, in Redis, for a moment).
# KEYS[1] the queue list
# ARGV[1] jid, ARGV[2] first index of the page, ARGV[3] page size,
# ARGV[4] bytes kept of the entry found (0 = all of it)
# Returns {index, entry (or its first ARGV[4] bytes), its length} when found,
# {next page's index} when not, {-1} at the end of the list.
FIND_QUEUED = """
local jid, start, size = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local keep = tonumber(ARGV[4])
if redis.call('TYPE', KEYS[1])['ok'] ~= 'list' then return {-1} end
local page = redis.call('LRANGE', KEYS[1], start, start + size - 1)
local by_text = '"jid":"' .. jid .. '"'
for i, entry in ipairs(page) do
  if string.find(entry, jid, 1, true) then
    local found
    if keep > 0 and #entry > keep then
      found = string.find(entry, by_text, 1, true)
    else
      local ok, decoded = pcall(cjson.decode, entry)
      if ok then
        found = type(decoded) == 'table' and decoded.jid == jid
      else
        found = string.find(entry, by_text, 1, true)
      end
    end
    if found then
      local shown = entry
      if keep > 0 and #entry > keep then shown = string.sub(entry, 1, keep) end
      return {start + i - 1, shown, #entry}
    end
  end
end
if #page < size then return {-1} end
return {start + size}
"""


@dataclass(frozen=True)
class FindQueued(ScriptCall):
    queue_key: str
    jid: str
    start: int  # first index of the page
    size: int  # entries in the page
    keep: int = 0  # bytes kept of the entry found (0 = all of it)

    def keys(self) -> list[str]:
        return [self.queue_key]

    def argv(self) -> list[Arg]:
        return [self.jid, self.start, self.size, self.keep]


# CANCEL: remove a waiting job (from its queue, the scheduled or the retry
# set) for good, only if it is still there, with what its end entails in the
# same step: status ``cancelled``, its unique lock released. A job fetched
# (or moved by a poller) meanwhile is left alone: the cancel request stops
# it where it runs (worker/cancels.py).
# KEYS[1] the queue list or sorted set, KEYS[2] the job's status key,
# KEYS[3] its unique lock (any key when ARGV[4] is '')
# ARGV[1] 'list' | 'zset', ARGV[2] the entry as stored, ARGV[3] new status
# ('' = status off), ARGV[4] the jid whose lock to release ('' = none;
# released only if that jid holds it), ARGV[5] status TTL (s), ARGV[6] the
# channel the job's end is published on ('' = none; the message is its
# status): a ``jobmaster.result`` waiting on it wakes with JobFailed (results.py)
# Returns 1 if removed, 0 if the entry was no longer there.
CANCEL_BODY = (
    EXPIRE_LEFT
    + """
local removed
if ARGV[1] == 'list' then
  removed = redis.call('LREM', KEYS[1], 1, ARGV[2])
else
  removed = redis.call('ZREM', KEYS[1], ARGV[2])
end
if removed == 0 then return 0 end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[5])
else
  expire_left(KEYS[2], ARGV[5])
end
if ARGV[4] ~= '' and redis.pcall('GET', KEYS[3]) == ARGV[4] then redis.call('DEL', KEYS[3]) end
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[6], ARGV[3]) end
"""
)
CANCEL = CANCEL_BODY + "return 1\n"


@dataclass(frozen=True)
class Cancel(ScriptCall):
    source_key: str  # the queue list or sorted set
    status_key: str
    lock_key: str  # any key when unlock_jid is ''
    source_kind: str  # 'list' | 'zset'
    entry: bytes  # as stored
    status: str  # '' = status off
    unlock_jid: str  # '' = none
    status_ttl: int
    ended_channel: str = ""  # '' = none

    def keys(self) -> list[str]:
        return [self.source_key, self.status_key, self.lock_key]

    def argv(self) -> list[Arg]:
        return [
            self.source_kind,
            self.entry,
            self.status,
            self.unlock_jid,
            self.status_ttl,
            self.ended_channel,
        ]


# CANCEL_STEP: CANCEL of a batch or chain job, with the workflow's step: the
# batch counts it as failed (it will not run, so on_success never fires and
# on_complete fires once the others have run), the chain stops.
# KEYS[1..3] and ARGV[1..6] as CANCEL, then KEYS[4..17] and ARGV[7..16] the
# workflow part's ``k`` and ``a`` (WORKFLOW_FUNCTION) up to the failed set's
# TTL, and ARGV[17] the job's jid. Built by CancelStep: a Cancel, then a
# WorkflowStep, then the jid (as BuryStep).
# Returns 1 if removed, 0 if the entry was no longer there.
CANCEL_STEP = (
    CANCEL_BODY
    + BATCH_FUNCTIONS
    + WORKFLOW_FUNCTION
    + SETTLE_WORKFLOW
    + """
local step_args = {unpack(ARGV, 7, 16)}
step_args[11], step_args[12] = ARGV[17], ARGV[5]
settle_workflow({unpack(KEYS, 4, 17)}, step_args)
return 1
"""
)


@dataclass(frozen=True)
class CancelStep(ScriptCall):
    cancel: Cancel
    step: WorkflowStep
    jid: str

    def keys(self) -> list[str]:
        return [*self.cancel.keys(), *self.step.keys()]

    def argv(self) -> list[Arg]:
        return [*self.cancel.argv(), *self.step.argv(), self.jid]


# JUDGE_ORPHANS: one page of the orphan scan (orphans.py) in one round trip,
# however many members it holds: for each identity, its heartbeat's fields;
# if it has none, the fence's silent mark set (the first sighting) and its
# age read; once that age reaches the grace, the mark deleted and the length
# of its in-progress list read, and a member whose list is empty dropped
# from the processes set. A heartbeat seen again deletes its mark (the count
# starts again). A key of a forged type is reported for that identity alone.
# KEYS[1] the processes set, then for each identity in ARGV order: its
# heartbeat, its silent mark, its in-progress list
# ARGV[1] the mark's TTL (ms; 0: no fence, a missing heartbeat is believed at
# once), ARGV[2] the grace (ms), ARGV[3] n identities, ARGV[4..3+n] the
# identities (members of the set), ARGV[4+n..] the heartbeat fields to read
# Returns, per identity: {1, field values...} (a heartbeat), {0, -1} (silent,
# not long enough), {0, length} (silent long enough: its list's length; 0:
# dropped), {-1, error} (a key of the wrong type).
JUDGE_ORPHANS = """
local window, grace, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local fields = {unpack(ARGV, 4 + n)}
local out = {}
for i = 1, n do
  local heartbeat, mark, list = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local found = redis.pcall('HMGET', heartbeat, unpack(fields))
  if found['err'] then
    out[i] = {-1, found['err']}
  elseif found[1] then
    if window > 0 then redis.call('DEL', mark) end
    out[i] = {1, unpack(found)}
  else
    local age = grace
    if window > 0 then
      redis.call('SET', mark, '1', 'NX', 'PX', window)
      local left = redis.call('PTTL', mark)
      age = left >= 0 and window - left or 0
    end
    if age < grace then
      out[i] = {0, -1}
    else
      if window > 0 then redis.call('DEL', mark) end
      local length = redis.pcall('LLEN', list)
      if type(length) == 'table' then
        out[i] = {-1, length['err']}
      else
        if length == 0 then redis.call('SREM', KEYS[1], ARGV[3 + i]) end
        out[i] = {0, length}
      end
    end
  end
end
return out
"""


@dataclass(frozen=True)
class JudgeOrphans(ScriptCall):
    processes_key: str
    heartbeat_keys: Sequence[str]  # one per identity, in order
    mark_keys: Sequence[str]
    inprogress_keys: Sequence[str]
    window_ms: int  # 0: no fence
    grace_ms: int
    identities: Sequence[str]
    fields: Sequence[str]

    def keys(self) -> list[str]:
        triples = zip(self.heartbeat_keys, self.mark_keys, self.inprogress_keys, strict=True)
        return [self.processes_key, *(key for triple in triples for key in triple)]

    def argv(self) -> list[Arg]:
        return [self.window_ms, self.grace_ms, len(self.identities), *self.identities, *self.fields]


class Scripts:
    """The scripts registered on one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.push = client.register_script(PUSH)
        self.fetch = client.register_script(FETCH)
        self.mark = client.register_script(MARK)
        self.give_back = client.register_script(GIVE_BACK)
        self.finish = client.register_script(FINISH)
        self.finish_many = client.register_script(FINISH_MANY)
        self.finish_step = client.register_script(FINISH_STEP)
        self.bury = client.register_script(BURY)
        self.bury_step = client.register_script(BURY_STEP)
        self.batch_add = client.register_script(BATCH_ADD)
        self.batch_cancel = client.register_script(BATCH_CANCEL)
        self.transfer = client.register_script(TRANSFER)
        self.periodic = client.register_script(PERIODIC)
        self.push_unique = client.register_script(PUSH_UNIQUE)
        self.unlock = client.register_script(UNLOCK)
        self.control_pop = client.register_script(CONTROL_POP)
        self.queue_ends = client.register_script(QUEUE_ENDS)
        self.peek = client.register_script(PEEK)
        self.peek_list = client.register_script(PEEK_LIST)
        self.pop_oldest = client.register_script(POP_OLDEST)
        self.expire_waiting = client.register_script(EXPIRE_WAITING)
        self.rate_count = client.register_script(RATE_COUNT)
        self.cancel_request = client.register_script(CANCEL_REQUEST)
        self.find_queued = client.register_script(FIND_QUEUED)
        self.cancel = client.register_script(CANCEL)
        self.cancel_step = client.register_script(CANCEL_STEP)
        self.judge_orphans = client.register_script(JUDGE_ORPHANS)
