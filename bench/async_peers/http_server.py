"""The local HTTP server of bench/async_peers.py's ``http`` workload.

    python http_server.py --port PORT [--loop uvloop|asyncio]

One process, one event loop, a bare ``asyncio.Protocol``: every request
(a GET without a body, so its end is its blank line) is answered at once
with the same 2-byte ``200 OK``, on an HTTP/1.1 keep-alive connection,
pipelined requests included. Nothing is parsed beyond the blank line: the
server is there to cost as little as possible beside what is measured. It
runs in the bench's own venv (uvloop when the bench has it, as
``--loop`` says) and exits on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import cast

RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
    b"Connection: keep-alive\r\n\r\nok"
)
END = b"\r\n\r\n"


class Answer(asyncio.Protocol):
    """Answers each complete request head on the connection, in order."""

    def __init__(self) -> None:
        self.pending = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but act alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.pending += data
        heads = self.pending.count(END)
        if heads and self.transport is not None:
            self.pending = self.pending[self.pending.rfind(END) + len(END) :]
            self.transport.write(RESPONSE * heads)


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = await loop.create_server(Answer, "127.0.0.1", port, backlog=1024)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(serve(args.port))
    else:
        asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
