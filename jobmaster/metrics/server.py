"""A tiny HTTP server driven by the master's select loop: it never waits.

The master calls ``handle(readable, writable)`` after each ``select``; the
listening socket and every connection are non-blocking. A connection reads
one request (at most ``MAX_REQUEST`` bytes), gets its whole response built
at once (a WSGI app: prometheus_client's, which picks the format the scraper
asks for and gzips if it may), and writes it as the socket takes it. Then
it shuts its side and reads (and drops) whatever the client still sends
until the client closes too: closing with bytes unread would reset the
connection and could cut the response short on the client's side.

A connection not done within ``TIMEOUT`` is closed, and at most
``MAX_CONNECTIONS`` are open: a silent or slow client costs a file
descriptor for a few seconds, never the loop's time.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import logging
import socket
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("jobmaster.metrics.server")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

PATH = "/metrics"
MAX_REQUEST = 8192  # bytes: a scraper's GET is a few hundred
TIMEOUT = 5.0  # seconds a connection may take from accept to its last byte sent
MAX_CONNECTIONS = 16
BACKLOG = 16


@dataclass
class _Connection:
    sock: socket.socket
    deadline: float  # monotonic
    received: bytearray = field(default_factory=bytearray)
    response: memoryview | None = None  # what is left to send, once built
    draining: bool = False  # all sent and our side shut: waiting for the client's close


class MetricsServer:
    def __init__(self, host: str, port: int, app: WSGIApp) -> None:
        self.host = host
        self.port = port
        self.app = app
        self.listener: socket.socket | None = None
        self.connections: dict[int, _Connection] = {}

    def listen(self) -> None:
        """Bind and listen; raises OSError (a port in use, an unknown host)."""
        info = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        listener = socket.create_server((self.host, self.port), family=info[0][0], backlog=BACKLOG)
        listener.setblocking(False)
        self.listener = listener

    @property
    def address(self) -> tuple[str, int]:
        if self.listener is None:
            raise RuntimeError("not listening: call listen() first")
        host, port = self.listener.getsockname()[:2]
        return str(host), int(port)

    # -- what select waits for -------------------------------------------------
    def read_fds(self) -> list[int]:
        # Reading a request, or draining once the response is sent.
        fds = [fd for fd, conn in self.connections.items() if conn.response is None]
        return [self.listener.fileno(), *fds] if self.listener is not None else fds

    def write_fds(self) -> list[int]:
        return [fd for fd, conn in self.connections.items() if conn.response is not None]

    def fds(self) -> list[int]:
        """Every descriptor of ours: a forked child must close them (else a
        scraper's connection would stay open as long as that child lives)."""
        own = [self.listener.fileno()] if self.listener is not None else []
        return [*own, *self.connections]

    # -- one pass ------------------------------------------------------------
    def handle(
        self, readable: Collection[int], writable: Collection[int], now: float | None = None
    ) -> None:
        now = time.monotonic() if now is None else now
        if self.listener is not None and self.listener.fileno() in readable:
            self._accept(self.listener, now)
        for fd, conn in list(self.connections.items()):
            if conn.draining and fd in readable:
                self._drain(fd, conn)
            elif conn.response is None and fd in readable:
                self._read(fd, conn)
            elif conn.response is not None and fd in writable:
                self._write(fd, conn)
            if fd in self.connections and now > conn.deadline:
                log.debug("metrics: closing a connection that took over %.0fs", TIMEOUT)
                self._close(fd)

    def close(self) -> None:
        for fd in list(self.connections):
            self._close(fd)
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    # -- connections -----------------------------------------------------------
    def _accept(self, listener: socket.socket, now: float) -> None:
        for _ in range(BACKLOG):  # bounded: a flood must not hold the loop
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of descriptors, a reset before accept
                log.warning("metrics: accept failed: %s", error)
                return
            if len(self.connections) >= MAX_CONNECTIONS:
                sock.close()
                continue
            sock.setblocking(False)
            self.connections[sock.fileno()] = _Connection(sock, now + TIMEOUT)

    def _read(self, fd: int, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client left
            self._close(fd)
            return
        conn.received += data
        if b"\r\n\r\n" in conn.received:
            conn.response = memoryview(self._respond(bytes(conn.received)))
            self._write(fd, conn)  # usually all of it, at once
        elif len(conn.received) > MAX_REQUEST:
            conn.response = memoryview(_plain("431 Request Header Fields Too Large", "too large"))
            self._write(fd, conn)

    def _write(self, fd: int, conn: _Connection) -> None:
        if conn.response is None:
            return
        try:
            sent = conn.sock.send(conn.response)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(fd)
            return
        conn.response = conn.response[sent:]
        if not conn.response:
            conn.response, conn.draining = None, True
            try:
                conn.sock.shutdown(socket.SHUT_WR)  # the client reads to its end, then closes
            except OSError:
                self._close(fd)

    def _drain(self, fd: int, conn: _Connection) -> None:
        try:
            if conn.sock.recv(4096):
                return  # more of a request we no longer read: dropped
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._close(fd)

    def _close(self, fd: int) -> None:
        conn = self.connections.pop(fd, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sock.close()

    # -- HTTP ------------------------------------------------------------------
    def _respond(self, request: bytes) -> bytes:
        head = request.split(b"\r\n\r\n", 1)[0]
        line, _, header_block = head.partition(b"\r\n")
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _plain("400 Bad Request", "bad request")
        method, target, _ = parts
        try:
            headers = http.client.parse_headers(io.BytesIO(header_block + b"\r\n\r\n"))
        except http.client.HTTPException:
            return _plain("400 Bad Request", "bad headers")
        url = urlsplit(target)
        if url.path != PATH:
            return _plain("404 Not Found", f"not found: the metrics are at {PATH}")
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "HTTP_ACCEPT": headers.get("Accept", ""),
            "HTTP_ACCEPT_ENCODING": headers.get("Accept-Encoding", ""),
        }
        try:
            return self._call_app(environ)
        except Exception:
            # A bug in building the metrics must not take the master down.
            log.exception("metrics: building the response failed")
            return _plain("500 Internal Server Error", "internal error (see the master's log)")

    def _call_app(self, environ: dict[str, Any]) -> bytes:
        started: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
            started.append((status, headers))

        body = b"".join(self.app(environ, start_response))
        status, headers = started[-1]
        return _response(status, headers, body)


def _plain(status: str, text: str) -> bytes:
    return _response(status, [("Content-Type", "text/plain; charset=utf-8")], f"{text}\n".encode())


def _response(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers)]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body
