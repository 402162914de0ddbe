"""jobmaster's jobs for bench/peers.py (``app = ["jobmaster_app"]`` in its config).

The decorator's defaults, as a user would write them.
"""

from __future__ import annotations

import marks

import jobmaster


@jobmaster.job
def noop() -> None:
    marks.noop()


@jobmaster.job
def hold(token: str, seconds: float) -> None:
    marks.hold(token, seconds)
