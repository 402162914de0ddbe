"""Remote commands through Redis: one reader and one parser for every process.

``jobmaster ctl quiet|resume|stop ID`` pushes a word onto ``control:<ID>``;
the master (supervisor/duties.py) and each child (worker/heartbeat.py) pop
their own list in a round trip they make anyway. Whoever can write that key
can quiet or stop the process (the README's "Redis ACL" recipe gives
producers no ``control:*``), but an entry must never cost more than a word:
a review pushed three 200 MB entries and the master grew to 1.4 GB and wrote
1 GB of log, and a newline in an entry forged a log line of its own. So:

- the read is bounded: at most ``BATCH`` entries a look, and of each only
  its first ``ENTRY_BYTES`` bytes cross the wire (CONTROL_POP in
  scripts.py cuts them inside Redis and says how long each really was);
- an entry is a command only if it is one of ``COMMANDS`` exactly, nothing
  longer; anything else is logged with ``%r`` (so no newline or escape
  reaches the log raw), cut to ``SHOWN`` characters with its size, at most
  ``LOGGED`` such lines a look and one line counting the rest.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from jobmaster.scripts import CONTROL_POP, ControlPop

log = logging.getLogger("jobmaster.control")

COMMANDS = ("quiet", "resume", "stop")
BATCH = 100  # entries read a look: ample for an operator, bounded for a flood
ENTRY_BYTES = 64  # bytes of an entry read: the longest command is 6
SHOWN = 40  # characters of an unknown entry shown in its log line
LOGGED = 3  # unknown entries logged one by one per look; the rest are counted


def pop(pipe: redis.client.Pipeline, key: str) -> None:
    """Queue the bounded read of control list ``key`` on ``pipe``; its reply is
    for ``parse``."""
    # EVALSHA (what the README's ACL user may run), loaded if need be by the
    # pipeline, which asks SCRIPT EXISTS first.
    call = ControlPop(key=key, most=BATCH, keep=ENTRY_BYTES)
    call.run(pipe.register_script(CONTROL_POP), client=pipe)


def parse(reply: Any, who: str) -> list[str]:
    """The commands in one ``pop`` reply, in order; the rest logged (``who``
    names the reader: "master", "child 2"...). Never raises on any reply."""
    items = list(reply) if isinstance(reply, list | tuple) else []
    commands: list[str] = []
    unknown = 0
    for i in range(0, len(items) - 1, 2):
        size, head = items[i], items[i + 1]
        text = _text(head)
        if size == -1:
            log.warning("%s: its control list was a %s, not a list: deleted", who, text[:SHOWN])
            continue
        if isinstance(size, int) and size == len(text) and text in COMMANDS:
            commands.append(text)
            continue
        unknown += 1
        if unknown <= LOGGED:
            log.warning("%s: ignored unknown remote command %r (%s bytes)", who, text[:SHOWN], size)
    if unknown > LOGGED:
        log.warning("%s: ignored %d more unknown remote commands", who, unknown - LOGGED)
    return commands


def _text(head: object) -> str:
    if isinstance(head, bytes):
        return head.decode(errors="replace")
    return str(head)
