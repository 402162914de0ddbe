"""The Lua scripts the ``a*`` producer calls run, on an asyncio client.

The scripts and their typed builders are scripts.py's; redis-py's
``AsyncScript`` sends EVALSHA and loads the script on NOSCRIPT (a restarted
or flushed Redis), as its sync ``Script`` does for the sync calls.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.commands.core import AsyncScript

from jobmaster import scripts
from jobmaster.scripts import ScriptCall


class AsyncScripts:
    """The producer's scripts, registered on one asyncio client (no round trip)."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.push = client.register_script(scripts.PUSH)
        self.push_unique = client.register_script(scripts.PUSH_UNIQUE)
        self.batch_add = client.register_script(scripts.BATCH_ADD)
        self.peek_list = client.register_script(scripts.PEEK_LIST)
        self.cancel_request = client.register_script(scripts.CANCEL_REQUEST)
        self.find_queued = client.register_script(scripts.FIND_QUEUED)
        self.cancel = client.register_script(scripts.CANCEL)
        self.cancel_step = client.register_script(scripts.CANCEL_STEP)


async def run(call: ScriptCall, script: AsyncScript, client: Any = None) -> Any:
    """``call`` (its KEYS and ARGV) through ``script``, on ``client`` (a pipeline) if given."""
    return await script(keys=call.keys(), args=call.argv(), client=client)
