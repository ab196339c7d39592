"""A request whose caller gave up must not break the connection when its answer comes."""

from __future__ import annotations

import asyncio
import gc
from typing import Any
from unittest import mock

import pytest

from groupwire.client.connection import Connection
from groupwire.client.errors import ConnectionClosedError
from groupwire.protocol.codec import decode_request, encode_response
from groupwire.protocol.framing import FrameDecoder, frame
from groupwire.protocol.messages import ApiVersionsRequest, ApiVersionsResponse


async def test_a_cancelled_request_answered_late_leaves_the_connection_usable() -> None:
    held: list[int] = []
    first_arrived = asyncio.Event()
    release = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(1 << 20)
        while data := await reader.read(65536):
            for payload in decoder.feed(data):
                cid = decode_request(payload).correlation_id
                if not held:  # the first request is answered only after its caller left
                    held.append(cid)
                    first_arrived.set()
                    await release.wait()
                writer.write(frame(encode_response(cid, ApiVersionsResponse())))
                await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = await Connection.open("127.0.0.1", port)
    try:
        waiting = asyncio.ensure_future(conn.send(ApiVersionsRequest()))
        await first_arrived.wait()
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        release.set()  # the late answer arrives for a request nobody awaits any more
        answer = await conn.send(ApiVersionsRequest(), timeout=5)
        assert isinstance(answer, ApiVersionsResponse)
        assert not conn.closed
    finally:
        await conn.close()
        server.close()
        await server.wait_closed()


async def test_a_cancellation_as_the_connection_completes_is_not_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.11's ``wait_for`` returns the result when its inner future finished in the
    same loop turn as the cancellation, and the caller runs on as if never cancelled (a
    demo once went on producing after SIGTERM). Opening a connection must not do that."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[tuple[asyncio.StreamReader, Any]] = loop.create_future()

    async def open_connection(*args: object, **kwargs: object) -> Any:
        return await opened

    monkeypatch.setattr(asyncio, "open_connection", open_connection)
    task = asyncio.create_task(Connection.open("127.0.0.1", 1))
    for _ in range(3):
        await asyncio.sleep(0)  # the task now waits for the connection
    writer = mock.Mock()
    writer.get_extra_info.return_value = None
    opened.set_result((asyncio.StreamReader(), writer))  # the connection completes ...
    task.cancel()  # ... in the same turn as the caller is cancelled
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_reset_seen_by_both_reader_and_writer_leaves_no_unretrieved_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker resets the connection while a large request is still being written: the
    reader fails the request's future, then ``drain`` fails too. The caller gets one
    ConnectionClosedError, and asyncio must not log "Future exception was never
    retrieved" for the future the reader failed."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = await Connection.open("127.0.0.1", port)
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def reset_while_writing() -> None:
        conn._fail(ConnectionResetError(104, "Connection reset by peer"))  # the reader
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(conn._writer, "drain", reset_while_writing)
    try:
        with pytest.raises(ConnectionClosedError):
            await conn.send(ApiVersionsRequest(), timeout=5)
        gc.collect()  # an unretrieved exception is reported when its future is freed
        assert not [c for c in reported if "never retrieved" in str(c.get("message"))]
    finally:
        loop.set_exception_handler(None)
        await conn.close()
        server.close()
        await server.wait_closed()
