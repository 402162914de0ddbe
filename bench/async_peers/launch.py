"""N copies of one worker command, for a peer whose worker runs one process.

    python launch.py N -- COMMAND...

arq's worker has no option for more processes (its docs say to start it
more than once); this starts ``N`` of them as its own children, so the
bench sees one pool with N worker processes, as for the other peers. TERM
and INT are passed on to each; it exits when all of them have, with the
first non-zero exit code, or 0.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any


def main() -> int:
    count, command = int(sys.argv[1]), sys.argv[sys.argv.index("--") + 1 :]
    procs = [subprocess.Popen(command) for _ in range(count)]

    def forward(signum: int, frame: Any) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [proc.wait() for proc in procs]
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main())
