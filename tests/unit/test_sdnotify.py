"""systemd notify: datagrams to a real AF_UNIX socket, no systemd needed."""

from __future__ import annotations

import logging
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from jobmaster.supervisor import sdnotify
from jobmaster.supervisor.sdnotify import Notifier

RECEIVE_TIMEOUT = 2.0


@pytest.fixture
def listener(short_tmp_dir: Path) -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket bound to a path, as systemd's NOTIFY_SOCKET would be."""
    path = str(short_tmp_dir / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(RECEIVE_TIMEOUT)
        yield sock, path


@pytest.fixture
def abstract_listener() -> Iterator[tuple[socket.socket, str]]:
    """The same in the abstract namespace: NOTIFY_SOCKET starts with "@"."""
    name = f"jobmaster-test-{secrets.token_hex(6)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(RECEIVE_TIMEOUT)
        yield sock, "@" + name


def nothing_waiting(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        sock.recv(4096)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(RECEIVE_TIMEOUT)
    return False


def test_ready_reaches_a_socket_in_a_directory(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    notifier = Notifier({"NOTIFY_SOCKET": path})
    assert notifier.enabled
    notifier.send("READY=1")
    assert sock.recv(4096) == b"READY=1"


def test_multi_line_messages_arrive_as_one_datagram(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    Notifier({"NOTIFY_SOCKET": path}).send("READY=1\nSTATUS=2/2 children")
    assert sock.recv(4096) == b"READY=1\nSTATUS=2/2 children"
    assert nothing_waiting(sock)


def test_ready_reaches_an_abstract_socket(abstract_listener: tuple[socket.socket, str]) -> None:
    sock, address = abstract_listener
    notifier = Notifier({"NOTIFY_SOCKET": address})
    assert notifier.enabled
    notifier.send("READY=1")
    assert sock.recv(4096) == b"READY=1"


@pytest.mark.parametrize("environ", [{}, {"NOTIFY_SOCKET": ""}, {"WATCHDOG_USEC": "2000000"}])
def test_no_notify_socket_means_disabled_and_silent(
    environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_socket(*args: object, **kwargs: object) -> None:
        raise AssertionError("a disabled notifier opened a socket")

    monkeypatch.setattr("jobmaster.supervisor.sdnotify.socket.socket", no_socket)
    notifier = Notifier(environ)
    assert not notifier.enabled
    notifier.send("READY=1")  # a no-op: no socket created
    notifier.watchdog()


def test_reads_os_environ_by_default(
    listener: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, path = listener
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    Notifier().send("STOPPING=1")
    assert sock.recv(4096) == b"STOPPING=1"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not Notifier().enabled


@pytest.mark.parametrize(
    ("usec", "interval"),
    [("2000000", 1.0), ("60000000", 30.0), ("0", None), ("", None), ("abc", None), ("-5", None)],
)
def test_watchdog_interval_is_half_of_watchdog_usec(usec: str, interval: float | None) -> None:
    assert Notifier({"WATCHDOG_USEC": usec}).watchdog_interval == interval


def test_watchdog_pings_once_per_interval(
    listener: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, path = listener
    now = [1000.0]
    monkeypatch.setattr(sdnotify, "time", SimpleNamespace(monotonic=lambda: now[0]))
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"})
    assert notifier.watchdog_interval == 1.0

    notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    now[0] += 0.5
    notifier.watchdog()  # not due yet
    now[0] += 0.49
    notifier.watchdog()
    assert nothing_waiting(sock)

    now[0] += 0.02  # 1.01 s after the first ping
    notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    notifier.watchdog()
    assert nothing_waiting(sock)


def test_watchdog_is_silent_without_watchdog_usec(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    notifier = Notifier({"NOTIFY_SOCKET": path})
    assert notifier.watchdog_interval is None
    notifier.watchdog()
    assert nothing_waiting(sock)


def test_a_missing_socket_logs_a_warning_and_does_not_raise(
    short_tmp_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(short_tmp_dir / "nobody-listens")})
    assert notifier.enabled
    with caplog.at_level(logging.WARNING, logger="jobmaster.supervisor.sdnotify"):
        notifier.send("READY=1")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "READY=1" in warnings[0].getMessage()
    assert warnings[0].name == "jobmaster.supervisor.sdnotify"
