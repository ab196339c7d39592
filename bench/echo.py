"""The ceiling: a raw asyncio Protocol that answers every framed msgpack request.

It does what any Python request server must do and nothing else: split frames, unpack
the msgpack envelope, pack an answer, write once per read. Each request is answered with
``[correlation_id, {"error_code": 0}]``, the very bytes the broker sends for a successful
Heartbeat, so a load generator sees identical traffic from both servers. It runs on the
same event loop as the broker (uvloop when installed) and uses the broker's framing.

``python -m bench.echo --port 0`` serves until SIGTERM; it prints ``listening PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any, cast

import msgpack

from groupwire.protocol.framing import FrameDecoder, frame


class EchoProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        out: list[bytes] = []
        for payload in self._decoder.feed(data):
            envelope: Any = msgpack.unpackb(payload, raw=False)
            out.append(frame(msgpack.packb([envelope[2], {"error_code": 0}])))
        if out and self._transport is not None:
            self._transport.write(b"".join(out))


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(EchoProtocol, host, port, backlog=1024)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    await stop.wait()
    server.close()


def run_loop(coro: Any) -> None:
    """uvloop when installed, as the broker does (cli/running.py)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
        return
    uvloop.run(coro)


def main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.echo", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    run_loop(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main(None))
