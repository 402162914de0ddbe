"""A big app for bench/memory.py (imported by the worker as ``app = ["bench_bigapp"]``).

At import it allocates ``BLOCK``, a ~200 MB ``bytes`` object filled with
data (``b"x" * n`` writes every byte, so every page is really resident, unlike
a lazily-zeroed ``bytearray(n)``). With ``preload = true`` the master imports
it before forking and the children share its pages copy-on-write; with
``preload = false`` every child imports it and holds its own copy.

``BENCH_BIGAPP_MB`` overrides the size (default 200).

``bench_bigapp.noop()`` is the trivial job used to warm the children up.
"""

from __future__ import annotations

import os

import jobmaster

SIZE_MB = int(os.environ.get("BENCH_BIGAPP_MB", "200"))
BLOCK = b"x" * (SIZE_MB * 2**20)


@jobmaster.job(name="bench_bigapp.noop", retry=False)
def noop() -> None:
    return None
