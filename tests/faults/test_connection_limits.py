"""Connection limits: too many connections are refused, half-sent frames time out, idle
connections without a partial frame are left to the (much longer) idle rule."""

from __future__ import annotations

import asyncio
import struct

from groupwire.client.connection import Connection
from groupwire.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

from .conftest import StartBroker


async def _closed_by_broker(reader: asyncio.StreamReader, within_s: float = 10) -> bool:
    try:
        data = await asyncio.wait_for(reader.read(1), within_s)
    except ConnectionResetError:
        return True
    return data == b""


async def test_connections_beyond_the_limit_are_refused(start_broker: StartBroker) -> None:
    broker = await start_broker(max_connections=3)
    held = [await Connection.open("127.0.0.1", broker.port) for _ in range(3)]
    for conn in held:
        assert isinstance(await conn.send(ApiVersionsRequest()), ApiVersionsResponse)
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    assert await _closed_by_broker(reader)
    writer.close()
    for conn in held:  # the ones inside keep working
        assert isinstance(await conn.send(ApiVersionsRequest()), ApiVersionsResponse)
    await held[0].close()
    await asyncio.wait_for(broker.wait_connections(at_most=2), 10)  # a slot was freed
    late = await Connection.open("127.0.0.1", broker.port)
    assert isinstance(await late.send(ApiVersionsRequest()), ApiVersionsResponse)
    for conn in [*held[1:], late]:
        await conn.close()


async def test_a_half_sent_frame_is_closed_after_the_frame_read_timeout(
        start_broker: StartBroker) -> None:
    broker = await start_broker(frame_read_timeout_ms=200)
    header_only_r, header_only_w = await asyncio.open_connection("127.0.0.1", broker.port)
    header_only_w.write(struct.pack(">I", 100))  # promises 100 bytes, sends none
    trickle_r, trickle_w = await asyncio.open_connection("127.0.0.1", broker.port)
    trickle_w.write(struct.pack(">I", 100) + b"x")
    idle = await Connection.open("127.0.0.1", broker.port)
    assert await _closed_by_broker(header_only_r)
    for _ in range(100):  # a byte now and then does not reset the clock of the frame
        if trickle_r.at_eof() or trickle_w.is_closing():
            break
        try:
            trickle_w.write(b"y")
            await trickle_w.drain()
        except ConnectionError:
            break
        await asyncio.sleep(0.02)
    assert await _closed_by_broker(trickle_r)
    # a connection between frames is only subject to connections_max_idle_ms (10 min)
    assert isinstance(await idle.send(ApiVersionsRequest()), ApiVersionsResponse)
    assert broker.metrics.registry.get_sample_value(
        "groupwire_connections_closed_total", {"reason": "frame-read-timeout"}) == 2
    await idle.close()
    for w in (header_only_w, trickle_w):
        w.close()
