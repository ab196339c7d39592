"""The broker's side of the heartbeat fast path: a pipelined burst on a real loopback
connection gets one answer per request, in the protocol's bytes, counted in the metrics;
heartbeats the fast path declines get the full path's answers in the same burst."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from groupwire.broker.coordinator import Renewal
from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.codec import HeartbeatFields, decode_response, encode_request
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.framing import frame
from groupwire.protocol.messages import ApiKey, HeartbeatRequest, HeartbeatResponse
from tests.integration.conftest import fast_settings
from tests.integration.rawgroup import RawMember, create_topic, form_group

HEARTBEAT = int(ApiKey.HEARTBEAT)


async def _read_answers(reader: asyncio.StreamReader, n: int) -> dict[int, tuple[bytes, int]]:
    answers: dict[int, tuple[bytes, int]] = {}
    for _ in range(n):
        (length,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 10))
        payload = await asyncio.wait_for(reader.readexactly(length), 10)
        cid, response = decode_response(payload, HeartbeatResponse)
        assert cid not in answers, f"correlation id {cid} answered twice"
        answers[cid] = (payload, response.error_code)
    return answers


async def test_a_pipelined_burst_is_answered_and_counted(tmp_path: Path) -> None:
    broker = Broker(fast_settings(tmp_path / "data"))
    await broker.start()
    try:
        conn = await Connection.open("127.0.0.1", broker.port)
        await create_topic(conn, "t", 2)
        members = [RawMember(conn, "g", ["t"]), RawMember(conn, "g", ["t"])]
        await form_group(members, "t", 2)
        before = broker.metrics.requests.count(HEARTBEAT, ErrorCode.NONE)
        settled: list[bool] = []
        renew = broker.renew_heartbeat

        def counting(conn_id: int, heartbeat: HeartbeatFields, now_ms: int) -> Renewal | None:
            renewal = renew(conn_id, heartbeat, now_ms)
            settled.append(renewal is not None)
            return renewal

        broker.renew_heartbeat = counting
        observed_before = broker.metrics.requests.observed(HEARTBEAT)

        def hb(cid: int, m: RawMember, **kw: int) -> bytes:
            return frame(encode_request(cid, HeartbeatRequest(
                group_id=m.group_id, generation_id=kw.get("generation_id", m.generation_id),
                member_id=m.member_id), "burst"))

        burst = [hb(cid, members[cid % 2]) for cid in range(1, 301)]
        burst[99] = hb(100, members[0], generation_id=members[0].generation_id + 7)
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        writer.write(b"".join(burst))
        await writer.drain()
        answers = await _read_answers(reader, len(burst))
        writer.close()
        assert sorted(answers) == list(range(1, 301))
        assert answers[100][1] == ErrorCode.ILLEGAL_GENERATION
        ok = {cid for cid, (_, code) in answers.items() if code == ErrorCode.NONE}
        assert ok == set(range(1, 301)) - {100}
        assert answers[1][0] == b"\x92\x01\x81\xaaerror_code\x00"  # docs/protocol.md bytes
        # the fast path settled all but the stale generation, which it handed on
        assert settled.count(True) == 299 and settled.count(False) == 1
        stats = broker.metrics.requests
        assert stats.count(HEARTBEAT, ErrorCode.NONE) - before == 299
        assert stats.count(HEARTBEAT, ErrorCode.ILLEGAL_GENERATION) == 1
        # every answer is in the latency histogram too
        assert stats.observed(HEARTBEAT) - observed_before == 300
        # the members heartbeated on the burst's connection: closing the first one
        # leaves them attached
        await conn.close()
        await broker.wait_connections(1)
        assert broker.coordinator is not None
        assert broker.coordinator.member_count() == 2
    finally:
        await broker.close()


async def test_a_fast_path_failure_is_answered_and_the_connection_goes_on(
        tmp_path: Path) -> None:
    """An exception in the fast path is logged and answered UNKNOWN_SERVER_ERROR, like one
    in the full path; the heartbeats around it are answered and nothing stays in flight."""
    broker = Broker(fast_settings(tmp_path / "data"))
    await broker.start()
    try:
        conn = await Connection.open("127.0.0.1", broker.port)
        await create_topic(conn, "t", 1)
        member = RawMember(conn, "g", ["t"], session_timeout_ms=10_000)
        await form_group([member], "t", 1)
        renew = broker.renew_heartbeat

        def failing_on_7(conn_id: int, heartbeat: HeartbeatFields,
                         now_ms: int) -> Renewal | None:
            if heartbeat[0] == 7:
                raise RuntimeError("boom")
            return renew(conn_id, heartbeat, now_ms)

        broker.renew_heartbeat = failing_on_7
        stats = broker.metrics.requests
        observed_before = stats.observed(HEARTBEAT)
        burst = b"".join(frame(encode_request(cid, HeartbeatRequest(
            group_id="g", generation_id=member.generation_id, member_id=member.member_id)))
            for cid in range(1, 13))
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        writer.write(burst)
        answers = await _read_answers(reader, 12)
        assert {cid: code for cid, (_, code) in answers.items()} == {
            cid: ErrorCode.UNKNOWN_SERVER_ERROR if cid == 7 else ErrorCode.NONE
            for cid in range(1, 13)}
        assert stats.count(HEARTBEAT, ErrorCode.UNKNOWN_SERVER_ERROR) == 1
        assert stats.observed(HEARTBEAT) - observed_before == 12
        # nothing left in flight: the connection answers the next heartbeat at once
        writer.write(frame(encode_request(7, HeartbeatRequest(
            group_id="g", generation_id=member.generation_id, member_id=member.member_id))))
        assert {cid: code for cid, (_, code) in (await _read_answers(reader, 1)).items()} == {
            7: ErrorCode.UNKNOWN_SERVER_ERROR}
        writer.close()
    finally:
        await broker.close()


async def test_a_heartbeat_reusing_an_in_flight_id_closes_the_connection(
        tmp_path: Path) -> None:
    """The fast path never answers a duplicate id: the full path closes, as docs/protocol.md
    §2 says for any request."""
    broker = Broker(fast_settings(tmp_path / "data"))
    await broker.start()
    try:
        conn = await Connection.open("127.0.0.1", broker.port)
        await create_topic(conn, "t", 1)
        member = RawMember(conn, "g", ["t"], session_timeout_ms=10_000)
        await form_group([member], "t", 1)

        def hb(cid: int, wait_ms: int) -> bytes:
            return frame(encode_request(cid, HeartbeatRequest(
                group_id="g", generation_id=member.generation_id, member_id=member.member_id,
                wait_ms=wait_ms)))

        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        writer.write(hb(5, 4000) + hb(6, 0))  # 5 is held (long poll), 6 ends it: both NONE
        answers = await _read_answers(reader, 2)
        assert {cid: code for cid, (_, code) in answers.items()} == {5: 0, 6: 0}
        writer.write(hb(7, 4000) + hb(7, 0))  # 7 is held, then 7 again
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing answered
        writer.close()
    finally:
        await broker.close()
