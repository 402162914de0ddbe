"""Exit codes of the ``jobmaster`` command and its processes: one table.

Reserved codes let the master tell "the app cannot even load" from an
ordinary crash, so a broken deploy halts instead of fork-looping.
"""

from __future__ import annotations

OK = 0
RUNTIME_FAILURE = 1
USAGE = 2  # bad usage or config, detected before anything is forked
APP_LOAD_FAILED = 3  # the app modules failed to import (in a child when preload is off)
# The master stopped gracefully because ``jobmaster ctl stop`` (a "stop" in
# its control list) asked: not 0, so ``Restart=on-failure`` brings it back
# unless the unit lists it in ``RestartPreventExitStatus`` (README "Deployment").
REMOTE_STOP = 4
# A child's ``on_child_start`` hook raised (lifecycle.py): a crash at start,
# so the master's crash-loop backoff applies. Only ever a child's code: the
# master goes on forking (slower and slower) until the hook works again.
CHILD_START_FAILED = 5
