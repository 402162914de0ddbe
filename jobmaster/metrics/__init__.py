"""Prometheus metrics, served by the master at ``/metrics`` when ``metrics_port`` is set.

Three choices shape this package; each answers a constraint of the master.

**How children's counts reach the master: cumulative snapshots over one
datagram socket.** Each child counts its own jobs in memory (``jobs.py``)
and, at most once a second when something changed and once more as it
stops, sends its *cumulative* totals as one JSON datagram on a
``socketpair(AF_UNIX, SOCK_DGRAM)`` the master made before forking
(``hub.py``). The master keeps the latest snapshot of each live child and,
when one is reaped, folds its last snapshot into the totals of the gone
(``totals.py``), so counters never go backwards.

- Why snapshots and not per-job messages: a lost or dropped datagram costs
  nothing, the next one carries everything; a job costs a lock and a dict
  update, never a syscall.
- Why a datagram socket and not the ``R``/``M``/``T`` ready pipe: a
  datagram is delivered whole or not at all, so there is no framing to
  get wrong next to those one-byte messages, and a non-blocking send that
  would block just drops the snapshot: a stalled master never stalls a
  child's main thread.
- Why not prometheus_client's multiprocess mode: it keeps mmap files per
  pid in a folder that must be named in the environment before the library
  is imported and wiped before each start, and that grows with every child
  ever started (a dead pid's files are read at every scrape, forever). Why
  not Redis counters: a round trip per job on the hot path, and totals
  shared by every master where each master should report its own children.
- The cost: a child killed outright (SIGKILL, OOM) loses the counts of at
  most its last second. A graceful stop, a recycle or a HUP loses nothing:
  the child's final snapshot is sent after its last job is recorded.

**Where ``/metrics`` is served: from the master's own select loop.** The
listening socket and its connections are non-blocking and sit in the
master's ``select`` set beside the signal pipe (``server.py``). A thread
would be simpler to write, but the master forks: a thread that holds a lock
(logging's, an allocator's, our own) at the instant of ``fork`` leaves it
held forever in the child. A separate exporter process would need a channel
of its own and supervision. Each connection is a small state machine with a
deadline and a size limit, so a slow or silent scraper only ever costs a
file descriptor, never a wait.

**Queue sizes and latency come from Redis** (``jobmaster.api.Stats``, two
pipelined round trips), read at scrape time and cached for a couple of
seconds, so a burst of scrapes costs Redis one read. They are global: every
master reports the same queues.
"""

from __future__ import annotations
