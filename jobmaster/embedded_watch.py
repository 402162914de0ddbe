"""The embedded Redis supervised like a child: restarted off the master's loop, with backoff.

The master's loop restarted a dead embedded server itself (``ensure_running``
blocked it up to 30 s, while no child was reaped or forked and no stop
deadline kept), and a restart that failed raised out of the loop: a damaged
append-only manifest made the master exit rc=1 within 0.1 s of the server's
SIGKILL, leaving its children to notice alone. Now one thread of its own
looks at the server every ``CHECK_EVERY`` seconds and restarts it there:

- a server that ran ``STABLE`` seconds or more is restarted at once, one
  that dies again sooner waits a backoff doubling from ``BACKOFF_FIRST`` to
  ``BACKOFF_MAX`` (a server that cannot live must not be restarted in a
  loop, as children are not);
- a restart that fails (its log tail says why) is logged and tried again
  after the backoff, for as long as it takes: the workers meanwhile log
  Redis as unreachable and carry on (SPEC §8), and nothing is lost;
- it runs in every process that started the server (``jobmaster run`` as a
  master or as a lone worker), never in a forked child: a thread does not
  survive a fork. The master's signals are blocked in it, as in the master's
  Redis thread, so every signal still reaches the main thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from jobmaster.embedded import EmbeddedRedis
from jobmaster.signals import MASTER_SIGNALS, blocked

log = logging.getLogger("jobmaster.embedded_watch")

CHECK_EVERY = 0.5  # seconds between looks at the server
STABLE = 30.0  # a server up this long is restarted at once when it dies
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0  # seconds, doubled at each failure
LINE_CHARS = 600  # of a failed start's error and log tail, in its log line


class EmbeddedWatch:
    def __init__(self, embedded: EmbeddedRedis) -> None:
        self.embedded = embedded
        self.stop_event = threading.Event()
        self.restarts = 0  # successful ones
        self.failures = 0  # restarts that failed
        self.delay = 0.0  # the backoff now
        self._up_since = time.monotonic()
        self._next_try: float | None = None  # set once a death is noticed
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with blocked(MASTER_SIGNALS):  # inherited by the thread
            self._thread = threading.Thread(
                target=self._run, name="jobmaster-embedded-redis", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 35.0) -> None:
        """Before the server's own stop: else this thread would start it again.
        Waits for a restart under way (up to its 30 s start timeout)."""
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self.stop_event.wait(CHECK_EVERY):
            try:
                self.check(time.monotonic())
            except Exception:  # a bug: logged, and the watch goes on
                log.exception("embedded Redis watch: unexpected error; carrying on")

    def check(self, now: float) -> None:
        """One look: a dead server is restarted when its backoff allows."""
        if self.embedded.process.is_running():
            return
        if self._next_try is None:  # the death just noticed
            if now - self._up_since < STABLE:
                self._back_off()
            else:
                self.delay = 0.0
            self._next_try = now + self.delay
        if now < self._next_try or self.stop_event.is_set():
            return
        try:
            self.embedded.ensure_running()
        except Exception as error:  # JobmasterError with the log tail, OSError...
            self.failures += 1
            self._back_off()
            self._next_try = time.monotonic() + self.delay
            log.error(
                "embedded redis-server could not be restarted (%s); trying again in %.0fs",
                one_line(error),
                self.delay,
            )
            return
        self.restarts += 1
        self._next_try = None
        self._up_since = time.monotonic()

    def _back_off(self) -> None:
        self.delay = min(BACKOFF_MAX, max(BACKOFF_FIRST, 2 * self.delay))


def one_line(error: BaseException) -> str:
    """The error and its server log tail on one line (one log line per event),
    the end kept: the server's last words say why it would not start."""
    text = " | ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text if len(text) <= LINE_CHARS else "..." + text[-LINE_CHARS:]


@contextlib.contextmanager
def watching(embedded: EmbeddedRedis | None) -> Iterator[None]:
    """The watch for as long as the block runs (nothing without an embedded server)."""
    if embedded is None:
        yield
        return
    watch = EmbeddedWatch(embedded)
    watch.start()
    try:
        yield
    finally:
        watch.stop()
