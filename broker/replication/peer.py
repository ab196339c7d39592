"""A broker's connection to another broker: one request at a time, which is all a
replica fetcher needs (the SDK's multiplexed connection lives in the client layer,
which the broker does not import)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import TypeVar

from groupwire.broker.cluster.keys import BrokerInfo
from groupwire.protocol.envelope import decode_response, encode_request
from groupwire.protocol.errors import ProtocolError
from groupwire.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, frame
from groupwire.protocol.messages import Request, Response

R = TypeVar("R", bound=Response)
READ_CHUNK = 1 << 16


class PeerError(Exception):
    """The peer could not be reached, closed the connection or answered nonsense; the
    caller drops this connection and opens another."""


class PeerConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 client_id: str, max_frame_bytes: int) -> None:
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._decoder = FrameDecoder(max_frame_bytes)
        self._ids = itertools.count(1)
        self.closed = False

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, timeout_s: float,
                   max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> PeerConnection:
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            raise PeerError(f"cannot connect to {host}:{port}: {exc}") from exc
        return cls(reader, writer, client_id, max_frame_bytes)

    async def request(self, request: Request, response_type: type[R], *,
                      timeout_s: float) -> R:
        if self.closed:
            raise PeerError("connection closed")
        cid = next(self._ids) & 0x7FFFFFFF
        try:
            async with asyncio.timeout(timeout_s):
                self._writer.write(frame(encode_request(cid, request, self._client_id)))
                await self._writer.drain()
                while True:
                    data = await self._reader.read(READ_CHUNK)
                    if not data:
                        raise PeerError("closed by the peer")
                    for payload in self._decoder.feed(data):
                        got, response = decode_response(payload, response_type)
                        if got == cid:
                            return response
        except (OSError, TimeoutError, ProtocolError) as exc:
            await self.close()
            raise PeerError(f"{type(exc).__name__}: {exc}") from exc
        except PeerError:
            await self.close()
            raise

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


class PeerLink:
    """One connection to whichever broker is wanted now: kept while that broker is the
    same registration and the connection is open, opened again otherwise."""

    def __init__(self, client_id: str, timeout_s: float) -> None:
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._conn: PeerConnection | None = None
        self._to: BrokerInfo | None = None

    async def to(self, broker: BrokerInfo) -> PeerConnection:
        if self._conn is None or self._conn.closed or self._to != broker:
            await self.close()
            self._conn = await PeerConnection.open(
                broker.host, broker.port, client_id=self._client_id,
                timeout_s=self._timeout_s)
            self._to = broker
        return self._conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
