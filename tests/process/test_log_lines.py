"""Log lines of a real process on a real pipe: a SIGKILL loses no line the
handler had returned from, and a fork does not inherit a write in flight.

The process is a small Python program with jobmaster's ``setup_logging``
(as ``jobmaster run`` sets it up), whose threads log without pause and, after
each line returns, write its number to a second pipe: a number read there is
a line the program believed written. The test SIGKILLs it mid-flood.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest

from tests.helpers import wait_until

pytestmark = [pytest.mark.process, pytest.mark.timeout(60)]

FLOOD = textwrap.dedent(
    """
    import logging, os, sys, threading
    from jobmaster.log import setup_logging

    acks = int(sys.argv[1])
    setup_logging("info", "text")
    log = logging.getLogger("jobmaster.tests.flood")

    def flood(thread):
        for n in range(10**9):
            log.info("line %d-%d %s", thread, n, "z" * (n % 300))
            os.write(acks, b"%d-%d\\n" % (thread, n))  # returned: it must be out

    for thread in range(8):
        threading.Thread(target=flood, args=(thread,), daemon=True).start()
    threading.Event().wait()
    """
)

FORK_AFTER_A_WRITE = textwrap.dedent(
    """
    import logging, os, sys, time
    from jobmaster.log import setup_logging

    setup_logging("info", "text")
    log = logging.getLogger("jobmaster.tests.fork")
    # As if a thread were inside a short write at the instant of the fork.
    logging.getLogger().handlers[0]._writing.add(object())
    pid = os.fork()
    if pid == 0:
        started = time.monotonic()
        log.info("long %s", "w" * 10000)  # waits for short writes in flight
        os._exit(0 if time.monotonic() - started < 1.0 else 3)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


# stdout block-buffered, as a service's is: a handler that left a line in
# the stream's buffer would lose it to the SIGKILL.
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


class Drain:
    """Reads a pipe to its end in a thread."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = bytearray()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while chunk := os.read(self.fd, 65536):
            self.data += chunk

    def finish(self) -> bytes:
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "the pipe was not closed"
        return bytes(self.data)


@pytest.fixture
def flood() -> Iterator[tuple[subprocess.Popen[bytes], Drain, Drain]]:
    acks_read, acks_write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", FLOOD, str(acks_write)],
        stdout=subprocess.PIPE,
        pass_fds=(acks_write,),
        start_new_session=True,
        env=BUFFERED,
    )
    os.close(acks_write)
    assert proc.stdout is not None
    log, acks = Drain(proc.stdout.fileno()), Drain(acks_read)
    try:
        yield proc, log, acks
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        acks.finish()
        log.finish()
        proc.stdout.close()
        os.close(acks_read)


def test_a_sigkilled_process_loses_no_line_it_had_logged(
    flood: tuple[subprocess.Popen[bytes], Drain, Drain],
) -> None:
    proc, log, acks = flood
    wait_until(lambda: acks.data.count(b"\n") > 5000, timeout=30, message="the threads do not log")
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    acked = acks.finish().decode().splitlines()
    written = log.finish().decode()
    assert written.endswith("\n"), "a line was cut short"
    pattern = re.compile(r".* INFO jobmaster\.tests\.flood pid=\d+: line (\d+-\d+) (z*)")
    logged = set()
    for line in written.splitlines():
        match = pattern.fullmatch(line)
        assert match, f"a torn line: {line[:120]!r}"
        logged.add(match[1])
    missing = [number for number in acked if number not in logged]
    assert not missing, f"{len(missing)} lines returned but never written: {missing[:5]}"
    assert len(logged) >= len(acked)


def test_a_forked_child_does_not_wait_for_its_parents_writes() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FORK_AFTER_A_WRITE],
        capture_output=True,
        env=BUFFERED,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().count("long ") == 1
