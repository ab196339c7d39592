"""Garbage on some connections never disturbs the groups on the others."""

from __future__ import annotations

import asyncio
import random
import struct

import msgpack

from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse

from .rawgroup import RawMember, create_topic, round_robin


async def _raw(broker):  # type: ignore[no-untyped-def]
    return await asyncio.open_connection("127.0.0.1", broker.port)


async def _read_frame(reader: asyncio.StreamReader) -> object:
    (n,) = struct.unpack(">I", await reader.readexactly(4))
    return msgpack.unpackb(await reader.readexactly(n), raw=False)


def _framed(value: object) -> bytes:
    body = msgpack.packb(value, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


async def _closed_by_broker(reader: asyncio.StreamReader) -> bool:
    """True once the broker closes the connection (EOF or reset) without answering."""
    try:
        data = await asyncio.wait_for(reader.read(1), 10)
    except ConnectionResetError:
        return True
    return data == b""


async def _stable_group(connect):  # type: ignore[no-untyped-def]
    conn = await connect("steady")
    await create_topic(conn, "steady", 2)
    member = RawMember(conn, "steady-group", ["steady"])
    await member.join_group()
    await member.sync(round_robin([member.member_id], "steady", 2))
    return conn, member


async def _still_stable(conn, member) -> None:  # type: ignore[no-untyped-def]
    assert (await member.heartbeat()).error_code == ErrorCode.NONE
    described = await conn.send(DescribeGroupsRequest(groups=["steady-group"]),
                                response_type=DescribeGroupsResponse)
    assert described.groups[0].group_state == "Stable"


async def test_unknown_api_gets_unsupported_version(broker) -> None:  # type: ignore[no-untyped-def]
    reader, writer = await _raw(broker)
    writer.write(_framed([99, 0, 5, "x", {}]))
    writer.write(_framed([12, 7, 6, "x", {}]))
    answers = [await _read_frame(reader), await _read_frame(reader)]
    for answer, cid in zip(answers, (5, 6), strict=True):
        assert isinstance(answer, list) and answer[0] == cid
        assert answer[1]["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    writer.close()


async def test_wrong_field_types_get_invalid_request_naming_the_path(broker) -> None:  # type: ignore[no-untyped-def]
    reader, writer = await _raw(broker)
    bad_fetch = {"topics": [{"topic": "t", "partitions": [{"partition": 0,
                                                           "fetch_offset": "zero"}]}]}
    writer.write(_framed([1, 0, 1, None, bad_fetch]))
    writer.write(_framed([12, 0, 2, None, {"group_id": "g", "member_id": "m"}]))
    writer.write(_framed([3, 0, 3, None, "not a map"]))
    answers = {a[0]: a[1] for a in [await _read_frame(reader) for _ in range(3)]}  # type: ignore[index]
    assert answers[1]["error_code"] == ErrorCode.INVALID_REQUEST
    assert "topics[0].partitions[0].fetch_offset" in answers[1]["error_message"]
    assert answers[2]["error_code"] == ErrorCode.INVALID_REQUEST
    assert "generation_id" in answers[2]["error_message"]
    assert answers[3]["error_code"] == ErrorCode.INVALID_REQUEST
    # the connection is still usable after bad bodies
    writer.write(_framed([18, 0, 4, None, {}]))
    ok = await _read_frame(reader)
    assert ok[0] == 4 and ok[1]["error_code"] == 0  # type: ignore[index]
    writer.close()


async def test_garbage_closes_only_its_connection(broker, connect) -> None:  # type: ignore[no-untyped-def]
    conn, member = await _stable_group(connect)
    rng = random.Random(7)
    cases = [
        struct.pack(">I", 0),                                    # empty frame
        struct.pack(">I", broker.settings.max_frame_bytes + 1),  # oversize frame
        struct.pack(">I", 3) + b"\xc1\xc1\xc1",                  # not msgpack
        _framed([1, 2, 3]),                                      # envelope of 3
        struct.pack(">I", 2) + b"\x90\x90",                      # trailing bytes
        _framed(["a", 0, 1, None, {}]),                          # api key not an int
    ] + [struct.pack(">I", 64) + rng.randbytes(64) for _ in range(20)]
    for payload in cases:
        reader, writer = await _raw(broker)
        writer.write(payload)
        try:
            answer = await asyncio.wait_for(reader.read(1 << 16), 10)
        except ConnectionResetError:
            answer = b""
        if answer:  # random bytes may form a valid envelope with a bad body: answered
            (n,) = struct.unpack(">I", answer[:4])
            decoded = msgpack.unpackb(answer[4:4 + n], raw=False)
            assert decoded[1]["error_code"] != 0
        writer.close()
    await _still_stable(conn, member)


async def test_half_frame_then_silence_is_closed_as_idle(start_broker, connect) -> None:  # type: ignore[no-untyped-def]
    broker = await start_broker(connections_max_idle_ms=300)
    reader, writer = await _raw(broker)
    writer.write(struct.pack(">I", 100) + b"\x95\x12")
    assert await _closed_by_broker(reader)
    writer.close()


async def test_frame_over_limit_closes_without_reply(broker, connect) -> None:  # type: ignore[no-untyped-def]
    conn, member = await _stable_group(connect)
    reader, writer = await _raw(broker)
    writer.write(struct.pack(">I", broker.settings.max_frame_bytes + 1) + b"\x00" * 1024)
    assert await _closed_by_broker(reader)
    writer.close()
    await _still_stable(conn, member)
