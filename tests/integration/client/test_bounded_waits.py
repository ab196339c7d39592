"""Waits that must end on their own: an unknown topic, a close against a stalled peer.

Each is bounded by ``asyncio.wait_for(..., 2)`` while the client's own timeouts are long
(30 s), so waiting out the request timeout fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from groupwire.client.connection import Connection
from groupwire.client.errors import UnknownTopicOrPartitionError
from groupwire.client.producer import Producer
from groupwire.protocol.messages import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

LONG_MS = 30000
BOUND_S = 2


async def test_send_to_an_unknown_topic_fails_soon_naming_it(bootstrap: str) -> None:
    async with Producer(bootstrap, request_timeout_ms=LONG_MS) as producer:
        with pytest.raises(UnknownTopicOrPartitionError, match="topic 'nosuch' does not exist"):
            await asyncio.wait_for(producer.send("nosuch", b"x"), BOUND_S)


async def test_close_returns_when_the_peer_stopped_reading() -> None:
    """A paused broker reads nothing: a request bigger than the socket buffers stays
    queued, and close() must not wait for it to drain."""
    stalled = asyncio.Event()

    async def never_read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stalled.set()
        await asyncio.Event().wait()  # cancelled when the server closes

    server = await asyncio.start_server(never_read, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = await Connection.open("127.0.0.1", port)
    big = ProduceRequest(topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=b"\0" * (32 << 20))])])
    sending = asyncio.ensure_future(conn.send(big, timeout=LONG_MS / 1000))
    try:
        await stalled.wait()
        await asyncio.sleep(0)  # let the send start writing
        await asyncio.wait_for(conn.close(timeout=0.2), BOUND_S)
        assert conn.closed
        with contextlib.suppress(ConnectionError):
            await asyncio.wait_for(sending, BOUND_S)
    finally:
        sending.cancel()
        server.close()
