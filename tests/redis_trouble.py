"""Making a test's private Redis misbehave: full (OOM) or replaced by an empty one.

Only ever applied to a per-test server (``private_redis``), so no later test
inherits a maxmemory or a wiped data directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import redis

from jobmaster.embedded import RedisServerProcess

BALLAST = "test:ballast"  # the value that fills Redis up; delete it to free memory
MB = 2**20


def fill_up(server: RedisServerProcess) -> redis.Redis:
    """Put Redis over its maxmemory (noeviction) until ``BALLAST`` is deleted.

    Returns an admin client (it may still delete, read, CONFIG SET).
    """
    admin = server.client()
    admin.config_set("maxmemory-policy", "noeviction")
    # SETRANGE: 8 MB in Redis from a tiny command (an 8 MB SET would also
    # leave an 8 MB query buffer, counted until Redis frees it a moment later).
    admin.setrange(BALLAST, 8 * MB, b"x")
    memory = admin.info("memory")
    # What maxmemory is compared with: buffers such as the AOF's are not counted.
    counted = int(memory["used_memory"]) - int(memory["mem_not_counted_for_evict"])
    admin.config_set("maxmemory", counted - 4 * MB)
    try:
        admin.set("test:probe", 1)
    except redis.exceptions.OutOfMemoryError:
        return admin
    raise AssertionError("Redis still accepts writes after fill_up")


def replace_with_an_empty_one(server: RedisServerProcess) -> None:
    """Stop the server and start a new one on the same port without its data
    (its AOF and RDB deleted): what a failover to an empty instance looks like."""
    server.stop()
    for path in Path(server.directory).iterdir():
        if path.name == "redis.log":
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    server.start()
