"""Who a worker process is, in Redis (the master names its children with it too).

The identity names the process's in-progress list and heartbeat. It has a
random boot nonce so that a recycled pid (common in containers, where every
boot starts at pid 1) never inherits a dead process's list.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field


def _nonce() -> str:
    return secrets.token_hex(4)


@dataclass(frozen=True)
class Identity:
    """Host, pid and boot nonce of one worker process (and its master's, if forked)."""

    hostname: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    nonce: str = field(default_factory=_nonce)
    master_pid: int | None = None
    index: int | None = None

    def __str__(self) -> str:
        # Braces would break the keys' cluster hash tag; hostnames never have them.
        host = self.hostname.replace("{", "").replace("}", "")
        return f"{host}:{self.pid}:{self.nonce}"
