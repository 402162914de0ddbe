"""The select-driven HTTP server, pumped by the test as the master's loop would.

Real loopback sockets, no fork. Clients that need a reply run in a thread
(urllib blocks); the test's own thread is the "master loop".
"""

from __future__ import annotations

import contextlib
import gzip
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, make_wsgi_app

from jobmaster.metrics import server as server_module
from jobmaster.metrics.server import MAX_CONNECTIONS, TIMEOUT, MetricsServer

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def served() -> Iterator[MetricsServer]:
    registry = CollectorRegistry(auto_describe=False)
    Counter("jobmaster_things", "Things.", registry=registry).inc(3)
    server = MetricsServer("127.0.0.1", 0, make_wsgi_app(registry))
    server.listen()
    try:
        yield server
    finally:
        server.close()


def pump(server: MetricsServer, until: Callable[[], bool], timeout: float = 10.0) -> None:
    """The master's loop: select on the server's sockets, then ``handle``."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "the server never got there"
        readable, writable, _ = select.select(server.read_fds(), server.write_fds(), [], 0.05)
        server.handle(readable, writable)


def fetch(server: MetricsServer, path: str = "/metrics", **headers: str) -> Any:
    """GET in a thread while this thread pumps; returns (status, headers, body)."""
    host, port = server.address
    result: list[Any] = []

    def get() -> None:
        request = urllib.request.Request(f"http://{host}:{port}{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
                result.append((response.status, dict(response.headers), response.read()))
        except urllib.error.HTTPError as error:
            result.append((error.code, dict(error.headers), error.read()))

    client = threading.Thread(target=get)
    client.start()
    pump(server, lambda: not client.is_alive())
    client.join()
    return result[0]


def test_metrics_are_served_in_the_text_format(served: MetricsServer) -> None:
    status, headers, body = fetch(served)
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    assert b"jobmaster_things_total 3.0" in body
    pump(served, lambda: served.connections == {})  # closed once the client is done


def test_the_library_negotiates_gzip_and_openmetrics(served: MetricsServer) -> None:
    status, headers, body = fetch(served, **{"Accept-Encoding": "gzip"})
    assert (status, headers["Content-Encoding"]) == (200, "gzip")
    assert b"jobmaster_things_total 3.0" in gzip.decompress(body)
    status, headers, body = fetch(served, Accept="application/openmetrics-text; version=1.0.0")
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")


def test_other_paths_are_not_found(served: MetricsServer) -> None:
    status, _, body = fetch(served, "/")
    assert status == 404
    assert b"/metrics" in body


def raw_exchange(server: MetricsServer, request: bytes) -> bytes:
    """Send raw bytes and read the reply to its end (in a thread, while this one pumps)."""
    replies: list[bytes] = []

    def exchange() -> None:
        with socket.create_connection(server.address, timeout=5) as client:
            with contextlib.suppress(ConnectionError):  # the server may answer mid-send
                client.sendall(request)
            reply = b""
            while chunk := client.recv(65536):
                reply += chunk
            replies.append(reply)

    client = threading.Thread(target=exchange)
    client.start()
    pump(server, lambda: not client.is_alive())
    client.join()
    pump(server, lambda: server.connections == {})  # the client's close seen: closed
    return replies[0]


def test_a_garbled_request_gets_400(served: MetricsServer) -> None:
    assert raw_exchange(served, b"HELLO\r\n\r\n").startswith(b"HTTP/1.1 400 ")


def test_an_oversized_request_gets_431(served: MetricsServer) -> None:
    request = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"x" * 20000
    assert raw_exchange(served, request).startswith(b"HTTP/1.1 431 ")


def test_a_failing_app_is_a_500_and_the_server_goes_on(
    served: MetricsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    working = served.app

    def broken(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise RuntimeError("a bug in a collector")

    served.app = broken
    assert raw_exchange(served, b"GET /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 500 ")
    served.app = working
    assert fetch(served)[0] == 200


def test_a_silent_client_is_dropped_at_its_deadline_and_blocks_nobody(
    served: MetricsServer,
) -> None:
    silent = socket.create_connection(served.address, timeout=5)
    silent.sendall(b"GET /metr")  # and nothing more
    pump(served, lambda: len(served.connections) == 1)
    assert fetch(served)[0] == 200  # served meanwhile
    pump(served, lambda: len(served.connections) == 1)  # that one closed, the silent one not
    served.handle([], [], now=time.monotonic() + TIMEOUT + 1)
    assert served.connections == {}
    silent.settimeout(5)
    assert silent.recv(100) == b""  # closed on it
    silent.close()


def test_connections_beyond_the_limit_are_closed_at_once(
    served: MetricsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "MAX_CONNECTIONS", 2)
    clients = [socket.create_connection(served.address, timeout=5) for _ in range(3)]
    pump(served, lambda: len(served.connections) == 2)
    pump(served, lambda: bool(select.select([clients[2]], [], [], 0)[0]))
    assert clients[2].recv(100) == b""  # the third was accepted and closed at once
    for client in clients:
        client.close()
    assert MAX_CONNECTIONS >= 2


def test_a_child_must_close_the_listener_and_every_connection(served: MetricsServer) -> None:
    client = socket.create_connection(served.address, timeout=5)
    pump(served, lambda: len(served.connections) == 1)
    assert served.listener is not None
    assert set(served.fds()) == {served.listener.fileno(), *served.connections}
    client.close()
