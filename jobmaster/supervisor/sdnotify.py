"""systemd's notify protocol: a datagram to $NOTIFY_SOCKET, no dependency needed.

READY=1 once the children are up (Type=notify units start dependants only
then), STOPPING=1, STATUS=..., and WATCHDOG=1 pings when WatchdogSec is set.
"""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger("jobmaster.supervisor.sdnotify")


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.address = env.get("NOTIFY_SOCKET") or None
        usec = env.get("WATCHDOG_USEC", "")
        self.watchdog_interval = int(usec) / 2_000_000 if usec.isdigit() and int(usec) else None
        self._next_watchdog = 0.0

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, message: str) -> None:
        if self.address is None:
            return
        address = self.address
        if address.startswith("@"):  # abstract namespace socket
            address = "\0" + address[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(message.encode(), address)
        except OSError as error:
            log.warning("sd_notify %r failed: %s", message, error)

    def watchdog(self) -> None:
        """Ping the watchdog if it is due (call from the master loop)."""
        if self.watchdog_interval is None:
            return
        now = time.monotonic()
        if now >= self._next_watchdog:
            self._next_watchdog = now + self.watchdog_interval
            self.send("WATCHDOG=1")
