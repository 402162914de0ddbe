"""A module that must never be imported by a worker: payloads name it to try.

Importing it touches the file named by ``JOBMASTER_TEST_IMPORT_MARKER`` (if
set), so an import caused by a name read from Redis would leave a trace
even if ``sys.modules`` were cleaned up afterwards. Nothing in the suite
imports it on purpose.
"""

from __future__ import annotations

import os
from pathlib import Path

MARKER_ENV = "JOBMASTER_TEST_IMPORT_MARKER"

if os.environ.get(MARKER_ENV):
    Path(os.environ[MARKER_ENV]).touch()


def pwn(path: str) -> None:
    """What a payload would like to call: leaves a file behind."""
    Path(path).touch()
