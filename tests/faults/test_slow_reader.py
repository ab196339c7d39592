"""A client that sends requests and never reads the answers cannot make the broker hold
them all (issue 14): once the answers pile up unsent, the connection is not read until
they drain, as Kafka mutes such a channel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from groupwire.broker.connection import ClientConnection
from groupwire.client.connection import Connection
from groupwire.protocol.codec import encode_request
from groupwire.protocol.framing import frame
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchPartition,
    FetchRequest,
    FetchTopic,
)
from tests.integration.rawgroup import create_topic, produce

from .conftest import StartBroker

REQUESTS = 2000
VALUE = b"v" * 60_000
"""Each answer carries this record: 2000 of them would be ~120 MB held for one client."""
HELD_AT_MOST = 16 * 1024 * 1024
"""What the broker may hold for it once paused: the answers of requests already taken."""
WAIT_S = 10.0


async def test_a_client_that_never_reads_stops_being_read(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start_broker()
    conn = await Connection.open("127.0.0.1", broker.port, client_id="setup")
    await create_topic(conn, "t", 1)
    await produce(conn, "t", 0, [VALUE])
    paused = asyncio.Event()
    fetches = [0]
    real_pause, real_dispatch = ClientConnection.pause_writing, type(broker).dispatch

    def pause_writing(self: ClientConnection) -> None:
        paused.set()
        real_pause(self)

    def dispatch(self: Any, peer: Any, cid: int, client_id: str, request: Any) -> None:
        if client_id == "never-reads":
            fetches[0] += 1
        real_dispatch(self, peer, cid, client_id, request)

    monkeypatch.setattr(ClientConnection, "pause_writing", pause_writing)
    monkeypatch.setattr(type(broker), "dispatch", dispatch)
    request = FetchRequest(max_wait_ms=0, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0)])])
    _, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    try:
        writer.write(b"".join(frame(encode_request(cid, request, client_id="never-reads"))
                              for cid in range(REQUESTS)))
        async with asyncio.timeout(WAIT_S):
            await paused.wait()
        for _ in range(50):
            await asyncio.sleep(0)  # turns in which an unmuted connection would go on
        held = max(c._transport.get_write_buffer_size()  # type: ignore[union-attr]
                   for c in broker._connections.values() if c._transport is not None)
        assert fetches[0] < REQUESTS
        assert held <= HELD_AT_MOST
        other = await Connection.open("127.0.0.1", broker.port, client_id="other")
        try:  # everyone else is served meanwhile
            async with asyncio.timeout(WAIT_S):
                await other.send(ApiVersionsRequest(), response_type=ApiVersionsResponse)
        finally:
            await other.close()
    finally:
        writer.transport.abort()
        await conn.close()
