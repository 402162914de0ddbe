"""Login throttling: a few wrong guesses per client address, then a wait.

Without it a script tried 2,000 passwords in 1.1 s and the right one still
worked. Each failed login, wrong bearer token or wrong ``?token=`` link
counts against the address it came from (``request.client``: the peer's
address, or the ``X-Forwarded-For`` of a proxy named in
``web_trusted_proxies`` and of no one else, web/app.py); after ``LIMIT``
failures within ``WINDOW`` seconds that address is refused (429) until the
oldest of them ages out, the right password included. A success clears its
record.

Addresses can still be many (a botnet, or a trusted proxy that passes on
what its clients claim), so all addresses together may fail at most
``GLOBAL_LIMIT`` times within ``GLOBAL_WINDOW``: past that, every login is
refused until the oldest failure ages out. A flood can then keep the owner
out for a minute at a time, never let it guess faster.

In memory, per process: bounded (``CAPACITY`` addresses, the stalest
forgotten first) so a flood of addresses cannot grow it without end.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

LIMIT = 5  # failures allowed per address within WINDOW
WINDOW = 300.0  # seconds
CAPACITY = 10_000  # addresses remembered
GLOBAL_LIMIT = 60  # failures allowed from all addresses together within GLOBAL_WINDOW
GLOBAL_WINDOW = 60.0  # seconds


class Throttle:
    def __init__(
        self,
        limit: int = LIMIT,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
        global_limit: int = GLOBAL_LIMIT,
    ) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque(maxlen=global_limit)  # the newest failures, any address
        self._lock = threading.Lock()  # pages check it from the thread pool too

    def wait(self, who: str) -> float:
        """Seconds before ``who`` may try again (0: now)."""
        with self._lock:
            now = self.clock()
            waits = [0.0]
            if len(self._all) == self._all.maxlen:  # the global cap, reached within its window?
                waits.append(self._all[0] + GLOBAL_WINDOW - now)
            if who in self._failures:  # a check alone remembers nothing
                recent = self._recent(who)
                if len(recent) >= self.limit:
                    waits.append(recent[0] + self.window - now)
            return max(waits)

    def failed(self, who: str) -> None:
        with self._lock:
            self._recent(who).append(self.clock())
            self._all.append(self.clock())
            self._failures.move_to_end(who)
            while len(self._failures) > CAPACITY:
                self._failures.popitem(last=False)

    def succeeded(self, who: str) -> None:
        with self._lock:
            self._failures.pop(who, None)

    def _recent(self, who: str) -> deque[float]:
        """``who``'s failures within the window (older ones dropped)."""
        found = self._failures.setdefault(who, deque(maxlen=self.limit))
        while found and found[0] <= self.clock() - self.window:
            found.popleft()
        return found
