"""Login throttling: a few wrong guesses per client address, then a wait.

Without it a script tried 2,000 passwords in 1.1 s and the right one still
worked. Each failed login, wrong bearer token or wrong ``?token=`` link
counts against the address it came from (``request.client``: the proxy's
``X-Forwarded-For`` when uvicorn trusts it); after ``LIMIT`` failures within
``WINDOW`` seconds that address is refused (429) until the oldest of them
ages out, the right password included. A success clears its record.

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


class Throttle:
    def __init__(
        self,
        limit: int = LIMIT,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()  # pages check it from the thread pool too

    def wait(self, who: str) -> float:
        """Seconds before ``who`` may try again (0: now)."""
        with self._lock:
            if who not in self._failures:  # a check alone remembers nothing
                return 0.0
            recent = self._recent(who)
            if len(recent) < self.limit:
                return 0.0
            return max(0.0, recent[0] + self.window - self.clock())

    def failed(self, who: str) -> None:
        with self._lock:
            self._recent(who).append(self.clock())
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
