"""What an operator needs to know about the Redis server, from one INFO call."""

from __future__ import annotations

from typing import Any

from jobmaster.api.base import Backend, Connection
from jobmaster.tolerant import number

# Policies under which a full Redis deletes any key, queues included: jobs vanish.
# (volatile-* ones only touch keys with a TTL: statuses and locks, never jobs.)
EVICTING = ("allkeys-lru", "allkeys-lfu", "allkeys-random")


def redis_info(connection: Connection = None) -> dict[str, Any]:
    """Version, mode, role, uptime, clients and memory of the server (INFO).

    ``warnings`` lists settings that put jobs at risk: an eviction policy that
    may delete any key (jobs included) when ``maxmemory`` is reached.
    """
    info = Backend.resolve(connection).redis.info()
    policy = str(info.get("maxmemory_policy", ""))
    maxmemory = int(number(info.get("maxmemory")))
    warnings = []
    if policy in EVICTING:
        warnings.append(
            f"maxmemory-policy is {policy}: Redis may delete keys when full; "
            "use noeviction so that jobs are never dropped"
        )
    return {
        "version": str(info.get("redis_version", "")),
        "mode": str(info.get("redis_mode", "standalone")),
        "role": str(info.get("role", "")),
        "uptime_seconds": int(number(info.get("uptime_in_seconds"))),
        "connected_clients": int(number(info.get("connected_clients"))),
        "blocked_clients": int(number(info.get("blocked_clients"))),
        "used_memory": int(number(info.get("used_memory"))),
        "used_memory_human": str(info.get("used_memory_human", "")),
        "used_memory_peak_human": str(info.get("used_memory_peak_human", "")),
        "maxmemory": maxmemory,
        "maxmemory_human": str(info.get("maxmemory_human", "0B")),
        "maxmemory_policy": policy,
        "warnings": warnings,
    }
