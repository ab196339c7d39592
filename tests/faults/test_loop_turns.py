"""No request holds the event loop (issue 14): a large frame is decoded, and a long
request's answer encoded, on a worker thread; long work runs a slice at a time, with
other connections answered in between; and the connection's own next request still
waits for it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

import groupwire.broker.connection as connection_module
from groupwire.broker.server import DELETE_CHUNK
from groupwire.broker.topic_apis import TopicApis
from groupwire.client.connection import Connection
from groupwire.protocol.codec import encode_request
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.framing import frame
from groupwire.protocol.limits import SCAN_ABOVE_BYTES
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)

from .conftest import StartBroker

ANSWER_S = 5.0
"""Bound on an answer that must come while the other request is held (old code: never)."""
GATE_S = 10.0
"""How long a held worker waits before going on by itself."""


class Gate:
    """Wraps a function run on a worker thread: its first call waits until ``open``."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.opened.wait(GATE_S)
        return self.real(*args)


async def _open(broker: Any, client_id: str) -> Connection:
    return await Connection.open("127.0.0.1", broker.port, client_id=client_id)


async def _topic(conn: Connection, name: str, partitions: int) -> None:
    created = await conn.send(CreateTopicsRequest(topics=[
        CreatableTopic(name=name, num_partitions=partitions)]),
        response_type=CreateTopicsResponse)
    assert created.topics[0].error_code == ErrorCode.NONE


def _list_offsets(topic: str, partitions: int) -> ListOffsetsRequest:
    return ListOffsetsRequest(topics=[ListOffsetsTopic(name=topic, partitions=[
        ListOffsetsPartition(partition_index=p, timestamp=-1) for p in range(partitions)])])


async def _answered_meanwhile(other: Connection) -> None:
    async with asyncio.timeout(ANSWER_S):
        answer = await other.send(ApiVersionsRequest(), response_type=ApiVersionsResponse)
    assert answer.error_code == ErrorCode.NONE


async def test_a_large_frame_is_decoded_off_the_loop(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start_broker()
    big, other = await _open(broker, "big"), await _open(broker, "other")
    await _topic(big, "t", 1)
    gate = Gate(connection_module._decode)
    monkeypatch.setattr(connection_module, "_decode", gate)
    request = _list_offsets("t", 3000)  # unknown partitions answer errors: still decoded
    sent = asyncio.ensure_future(big.send(request, response_type=ListOffsetsResponse))
    try:
        assert await asyncio.to_thread(gate.entered.wait, GATE_S), "not decoded off the loop"
        await _answered_meanwhile(other)  # the loop is free while the frame decodes
    finally:
        gate.opened.set()
    answer = await sent
    parts = answer.topics[0].partitions
    assert [p.partition_index for p in parts] == list(range(3000))
    assert parts[0].error_code == ErrorCode.NONE and parts[0].offset == 0
    assert parts[1].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_long_answer_is_encoded_off_the_loop(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = await start_broker(loop_slice_ms=0)  # every request of 2+ steps is long
    big, other = await _open(broker, "big"), await _open(broker, "other")
    await _topic(big, "t", 3)
    gate = Gate(connection_module._encode)
    monkeypatch.setattr(connection_module, "_encode", gate)
    sent = asyncio.ensure_future(big.send(_list_offsets("t", 3),
                                          response_type=ListOffsetsResponse))
    try:
        assert await asyncio.to_thread(gate.entered.wait, GATE_S), "not encoded off the loop"
        await _answered_meanwhile(other)
    finally:
        gate.opened.set()
    answer = await sent
    assert [(p.partition_index, p.error_code, p.offset)
            for p in answer.topics[0].partitions] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]


async def test_long_work_lets_other_connections_in_and_holds_its_own(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    partitions = 400
    broker = await start_broker(loop_slice_ms=0)
    big, other = await _open(broker, "big"), await _open(broker, "other")
    await _topic(big, "t", partitions)
    real = TopicApis._list_one
    started, steps = asyncio.Event(), [0]

    def counted(self: TopicApis, *args: Any) -> Any:
        steps[0] += 1
        started.set()
        return real(self, *args)

    monkeypatch.setattr(TopicApis, "_list_one", counted)
    request = _list_offsets("t", partitions)
    assert len(request.topics[0].partitions) * 8 < SCAN_ABOVE_BYTES  # decoded on the loop
    sent = asyncio.ensure_future(big.send(request, response_type=ListOffsetsResponse))
    after = asyncio.ensure_future(big.send(ApiVersionsRequest(),
                                           response_type=ApiVersionsResponse))
    async with asyncio.timeout(ANSWER_S):
        await started.wait()
    await _answered_meanwhile(other)
    assert 0 < steps[0] < partitions  # answered between two slices of the long request
    assert not after.done()  # its own connection's next request waits for it
    answer = await sent
    assert len(answer.topics[0].partitions) == partitions
    await after
    assert steps[0] == partitions


async def test_a_pipelined_backlog_is_read_a_slice_at_a_time(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    requests = 1000
    broker = await start_broker(loop_slice_ms=0)
    order: list[str] = []
    real = type(broker).dispatch

    def recorded(self: Any, conn: Any, cid: int, client_id: str, request: Any) -> None:
        order.append(client_id)
        real(self, conn, cid, client_id, request)

    monkeypatch.setattr(type(broker), "dispatch", recorded)
    other = await _open(broker, "other")
    order.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    try:
        writer.write(b"".join(frame(encode_request(cid, ApiVersionsRequest(), client_id="pipe"))
                              for cid in range(requests)))
        await writer.drain()
        async with asyncio.timeout(ANSWER_S):
            await reader.readexactly(4)  # the first answer is out: the backlog is read
        await _answered_meanwhile(other)
        assert "other" in order
        assert order.index("other") < requests  # not after the whole backlog
        async with asyncio.timeout(ANSWER_S):
            while order.count("pipe") < requests:  # the rest is still answered
                await reader.read(65536)
    finally:
        writer.close()


async def test_a_large_delete_groups_runs_a_chunk_of_groups_at_a_time(
        start_broker: StartBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    groups = [f"g{i:03}" for i in range(2 * DELETE_CHUNK + 2)]
    broker = await start_broker(loop_slice_ms=0)
    conn = await _open(broker, "admin")
    await _topic(conn, "t", 1)
    for group in groups:  # an offset commit outside any generation makes an Empty group
        committed = await conn.send(OffsetCommitRequest(group_id=group, topics=[
            OffsetCommitRequestTopic(name="t", partitions=[
                OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])]),
            response_type=OffsetCommitResponse)
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
    coordinator = broker.coordinator
    assert coordinator is not None
    real, chunks = coordinator.handle, []

    def counted(ctx: Any, request: Any, now_ms: int) -> Any:
        if isinstance(request, DeleteGroupsRequest):
            chunks.append(len(request.groups_names))
        return real(ctx, request, now_ms)

    monkeypatch.setattr(coordinator, "handle", counted)
    deleted = await conn.send(DeleteGroupsRequest(groups_names=[*groups, "missing"]),
                              response_type=DeleteGroupsResponse)
    assert chunks == [DELETE_CHUNK, DELETE_CHUNK, 3]
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        *((g, ErrorCode.NONE) for g in groups), ("missing", ErrorCode.GROUP_ID_NOT_FOUND)]
    listed = await conn.send(ListGroupsRequest(), response_type=ListGroupsResponse)
    assert not {g.group_id for g in listed.groups} & set(groups)
