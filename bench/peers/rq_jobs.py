"""RQ's jobs for bench/peers.py: plain functions, as RQ enqueues them.

``rq worker-pool`` imports this module by the job's function path
(``rq_jobs.noop``); bench/peers is on the workers' PYTHONPATH.
"""

from __future__ import annotations

import marks


def noop() -> None:
    marks.noop()


def hold(token: str, seconds: float) -> None:
    marks.hold(token, seconds)
