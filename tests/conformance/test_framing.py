"""§1 framing and the §2 rule that malformed frames close only their own connection."""

from __future__ import annotations

import struct

import pytest

from .conftest import Connect, StartBroker
from .wire import (
    ALL_API_KEYS,
    DEFAULT_MAX_FRAME_BYTES,
    Api,
    Err,
    WireConn,
    assert_shape,
    frame,
    pack,
    request_bytes,
)

SMALL_FRAME = 131_072  # the smallest limit the broker accepts as a setting


async def assert_closed_unanswered(conn: WireConn) -> None:
    assert await conn.closed_by_broker(), "broker kept the connection open"
    assert conn.frames_received == 0, "broker answered a frame it should not have read"


async def assert_still_serving(conn: WireConn) -> None:
    body = await conn.call(Api.API_VERSIONS, {})
    assert body["error_code"] == Err.NONE


async def test_api_versions_announces_default_max_frame_bytes(conn: WireConn) -> None:
    body = await conn.call(Api.API_VERSIONS, {})
    assert body["error_code"] == Err.NONE
    assert_shape(Api.API_VERSIONS, body)
    assert body["max_frame_bytes"] == DEFAULT_MAX_FRAME_BYTES
    keys = {e["api_key"]: (e["min_version"], e["max_version"]) for e in body["api_keys"]}
    assert keys == {k: (0, 0) for k in ALL_API_KEYS}


async def test_api_versions_announces_configured_max_frame_bytes(
        start_broker: StartBroker, connect: Connect) -> None:
    broker = await start_broker(max_frame_bytes=SMALL_FRAME)
    conn = await connect(target=broker)
    body = await conn.call(Api.API_VERSIONS, {"client_software_name": "checker",
                                              "client_software_version": "0"})
    assert body["max_frame_bytes"] == SMALL_FRAME


async def test_zero_length_frame_closes_unread(conn: WireConn, connect: Connect) -> None:
    bystander = await connect()
    conn.write_raw(struct.pack(">I", 0) + request_bytes(Api.API_VERSIONS, {}, cid=1))
    await assert_closed_unanswered(conn)
    await assert_still_serving(bystander)


async def test_frame_over_limit_closes_unread(start_broker: StartBroker,
                                              connect: Connect) -> None:
    broker = await start_broker(max_frame_bytes=SMALL_FRAME)
    bystander = await connect(target=broker)
    conn = await connect(target=broker)
    # The length alone must be enough: the broker may not wait for the body to arrive.
    conn.write_raw(struct.pack(">I", SMALL_FRAME + 1) + b"\x95\x12\x00\x01")
    await assert_closed_unanswered(conn)
    await assert_still_serving(bystander)


async def test_frame_of_exactly_the_limit_is_read(start_broker: StartBroker,
                                                  connect: Connect) -> None:
    broker = await start_broker(max_frame_bytes=SMALL_FRAME)
    conn = await connect(target=broker)
    base = len(pack([18, 0, 1, None, {"padding": b""}]))  # bin: no str over 32 767 (§2)
    pad = SMALL_FRAME - base
    for _ in range(3):  # the str header grows with the string; settle its width
        payload = pack([18, 0, 1, None, {"padding": b"x" * pad}])
        pad -= len(payload) - SMALL_FRAME
    payload = pack([18, 0, 1, None, {"padding": b"x" * pad}])
    assert len(payload) == SMALL_FRAME
    body = await conn.call(Api.API_VERSIONS, {"padding": b"x" * pad},
                           cid=1, client_id=None)
    assert body["error_code"] == Err.NONE


CLOSING_PAYLOADS = {
    "not msgpack": b"\xc1",
    "truncated value": b"\x95\x12\x00",
    "trailing bytes": pack([18, 0, 1, None, {}]) + b"\xc0",
    "two values": pack([18, 0, 1, None, {}]) + pack([18, 0, 2, None, {}]),
    "invalid utf-8 in client_id": b"\x95\x12\x00\x01\xa2\xff\xfe\x80",
    "invalid utf-8 in a body key": b"\x95\x12\x00\x01\xc0\x81\xa2\xff\xfe\xc0",
    "3-array": pack([18, 0, 1]),
    "6-array": pack([18, 0, 1, None, {}, 0]),
    "map envelope": pack({"api_key": 18, "api_version": 0, "correlation_id": 1}),
    "int envelope": pack(18),
    "str api_key": pack(["18", 0, 1, None, {}]),
    "nil api_version": pack([18, None, 1, None, {}]),
    "str correlation_id": pack([18, 0, "1", None, {}]),
    "float correlation_id": pack([18, 0, 1.0, None, {}]),
    "bool api_key": pack([True, 0, 1, None, {}]),
}


@pytest.mark.parametrize("payload", CLOSING_PAYLOADS.values(), ids=CLOSING_PAYLOADS.keys())
async def test_malformed_frame_closes_only_its_connection(payload: bytes,
                                                          connect: Connect) -> None:
    bystander = await connect()
    parked = bystander.send(Api.API_VERSIONS, {})  # in flight on the other connection
    conn = await connect()
    conn.write_raw(frame(payload))
    await assert_closed_unanswered(conn)
    assert (await parked)["error_code"] == Err.NONE
    await assert_still_serving(bystander)


async def test_nil_client_id_and_extreme_correlation_ids_are_echoed(conn: WireConn) -> None:
    for cid in (0, 2**31 - 1, -(2**31), -7):
        body = await conn.call(Api.API_VERSIONS, {}, cid=cid, client_id=None)
        assert body["error_code"] == Err.NONE
    assert conn.arrivals == [0, 2**31 - 1, -(2**31), -7]


async def test_many_pipelined_requests_are_all_answered(conn: WireConn) -> None:
    """§2.5: reading ahead is bounded by backpressure, never by an error."""
    futs = [conn.send(Api.API_VERSIONS, {}) for _ in range(300)]
    for fut in futs:
        assert (await fut)["error_code"] == Err.NONE
    assert sorted(conn.arrivals) == list(range(1, 301))


async def test_idle_connection_is_closed(start_broker: StartBroker, connect: Connect) -> None:
    broker = await start_broker(connections_max_idle_ms=200)
    conn = await connect(target=broker)
    await assert_still_serving(conn)
    assert await conn.closed_by_broker()
