"""The SDK routes as Kafka's clients do, against scripted nodes (scripted_broker.py):
Produce and Fetch to each partition's leader, topic APIs to the controller, group
requests to the coordinator, and each follows a leader, controller or coordinator that
moved. Node 1 is the bootstrap broker in every test, so the old code (everything over
the bootstrap connection) fails each one.
"""

from __future__ import annotations

import asyncio

import pytest

from groupwire.client.admin import Admin
from groupwire.client.consumer import Consumer
from groupwire.client.producer import Producer
from groupwire.client.types import TopicPartition
from groupwire.protocol.batches import BatchRecord, decode_records, encode_batch
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    SyncGroupResponse,
    TopicProduceResponse,
    response_type_for,
)

from .scripted_broker import ScriptedNode, cluster_of, metadata

BOUND_S = 10


async def test_produce_goes_to_each_leader_and_follows_a_moved_one() -> None:
    """Partition 0 is led by node 1, partition 1 by node 2 until node 2 answers
    NOT_LEADER_OR_FOLLOWER and the leadership moves to node 1: every record lands once,
    in order, and each Produce carries acks=-1 and the request timeout."""
    leaders = {"t": [1, 2]}
    logs: dict[int, list[bytes | None]] = {0: [], 1: []}
    nodes: list[ScriptedNode] = []

    def handle(node: ScriptedNode, req: Request) -> Response:
        if isinstance(req, MetadataRequest):
            return metadata(nodes, leaders, controller_id=1)
        assert isinstance(req, ProduceRequest)
        out = []
        for p in req.topic_data[0].partition_data:
            if node.node_id == 2:  # loses the leadership as the first batch arrives
                leaders["t"][p.index] = 1
            if leaders["t"][p.index] != node.node_id:
                out.append(PartitionProduceResponse(
                    index=p.index, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER))
                continue
            base = len(logs[p.index])
            logs[p.index].extend(r.value for r in decode_records(p.records))
            out.append(PartitionProduceResponse(index=p.index, base_offset=base))
        return ProduceResponse(responses=[TopicProduceResponse(name="t",
                                                               partition_responses=out)])

    async with cluster_of(2, handle) as started:
        nodes.extend(started)
        async with asyncio.timeout(BOUND_S), Producer(
                nodes[0].address, linger_ms=0, request_timeout_ms=4000,
                retry_backoff_ms=1) as producer:
            futures = [await producer.send("t", f"{p}-{i}".encode(), partition=p)
                       for i in range(3) for p in (0, 1)]
            got = [await f for f in futures]
    assert logs == {0: [b"0-0", b"0-1", b"0-2"], 1: [b"1-0", b"1-1", b"1-2"]}
    assert [(m.partition, m.offset) for m in got] == [(p, i) for i in range(3) for p in (0, 1)]
    first, second = nodes
    refused = [p.index for r in second.sent(ProduceRequest)
               for p in r.topic_data[0].partition_data]  # type: ignore[attr-defined]
    assert refused and set(refused) == {1}   # node 2 only ever got partition 1
    assert {p.index for r in first.sent(ProduceRequest)
            for p in r.topic_data[0].partition_data} == {0, 1}  # type: ignore[attr-defined]
    for r in first.sent(ProduceRequest) + second.sent(ProduceRequest):
        assert (r.acks, r.timeout_ms) == (-1, 4000)  # type: ignore[attr-defined]


async def test_acks_is_validated_and_sent() -> None:
    with pytest.raises(ValueError, match="acks=0 is not supported"):
        Producer("127.0.0.1:1", acks=0)
    with pytest.raises(ValueError, match="acks must be"):
        Producer("127.0.0.1:1", acks=2)
    assert Producer("127.0.0.1:1").acks == -1
    assert Producer("127.0.0.1:1", acks="all").acks == -1
    nodes: list[ScriptedNode] = []

    def handle(node: ScriptedNode, req: Request) -> Response:
        if isinstance(req, MetadataRequest):
            return metadata(nodes, {"t": [1]}, controller_id=1)
        return ProduceResponse(responses=[TopicProduceResponse(
            name="t", partition_responses=[PartitionProduceResponse(index=0, base_offset=0)])])

    async with cluster_of(1, handle) as started:
        nodes.extend(started)
        async with asyncio.timeout(BOUND_S), Producer(nodes[0].address, acks=1) as producer:
            await producer.send_and_wait("t", b"v")
    (req,) = nodes[0].sent(ProduceRequest)
    assert req.acks == 1  # type: ignore[attr-defined]


async def test_fetch_goes_to_each_leader_and_follows_a_moved_one_at_the_same_offset() -> None:
    leaders = {"t": [1, 2]}
    epochs = {("t", 0): 3, ("t", 1): 5}
    logs = {0: [b"a0", b"a1"], 1: [b"b0", b"b1"]}
    nodes: list[ScriptedNode] = []

    async def handle(node: ScriptedNode, req: Request) -> Response:
        if isinstance(req, MetadataRequest):
            return metadata(nodes, leaders, controller_id=1, epochs=epochs)
        if isinstance(req, ListOffsetsRequest):
            return ListOffsetsResponse(topics=[ListOffsetsTopicResponse(name="t", partitions=[
                ListOffsetsPartitionResponse(partition_index=p.partition_index, offset=0)
                for p in req.topics[0].partitions])])
        assert isinstance(req, FetchRequest)
        parts = []
        for p in req.topics[0].partitions:
            if leaders["t"][p.partition] != node.node_id:
                parts.append(FetchPartitionData(partition_index=p.partition,
                                                error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER))
                continue
            if p.partition == 1 and node.node_id == 2:  # answer, then lose the leadership
                leaders["t"][1], epochs[("t", 1)] = 1, 6
            log = logs[p.partition]
            records = (encode_batch([BatchRecord(v, None, [], 0) for v in
                                     log[p.fetch_offset:p.fetch_offset + 1]],
                                    base_offset=p.fetch_offset)
                       if p.fetch_offset < len(log) else b"")
            parts.append(FetchPartitionData(partition_index=p.partition,
                                            high_watermark=len(log), records=records))
        if not any(d.records for d in parts):
            await asyncio.sleep(req.max_wait_ms / 1000)  # the broker's long poll
        return FetchResponse(responses=[FetchTopicResponse(topic="t", partitions=parts)])

    got: dict[int, list[bytes | None]] = {0: [], 1: []}
    async with cluster_of(2, handle) as started:
        nodes.extend(started)
        async with asyncio.timeout(BOUND_S), Consumer(
                nodes[0].address, fetch_max_wait_ms=20, retry_backoff_ms=1,
                auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
            while sum(map(len, got.values())) < 4:
                for tp, records in (await consumer.getmany(timeout_ms=100)).items():
                    got[tp.partition].extend(r.value for r in records)
    assert got == logs  # nothing lost or read twice across the move
    first, second = nodes
    to_second = [(p.partition, p.fetch_offset, p.current_leader_epoch)
                 for r in second.sent(FetchRequest) for p in r.topics[0].partitions]  # type: ignore[attr-defined]
    assert to_second[0] == (1, 0, 5) and {p for p, _, _ in to_second} == {1}
    to_first = [(p.partition, p.fetch_offset, p.current_leader_epoch)
                for r in first.sent(FetchRequest) for p in r.topics[0].partitions]  # type: ignore[attr-defined]
    assert (1, 1, 6) in to_first   # from the new leader, at the offset it had reached
    assert all(e == 3 for p, _, e in to_first if p == 0)
    assert first.sent(ListOffsetsRequest) and second.sent(ListOffsetsRequest)


async def test_topic_apis_go_to_the_controller_and_follow_not_controller() -> None:
    controller = {"id": 3}   # as metadata says; node 3 no longer is
    nodes: list[ScriptedNode] = []

    def handle(node: ScriptedNode, req: Request) -> Response:
        if isinstance(req, MetadataRequest):
            return metadata(nodes, {}, controller_id=controller["id"])
        assert isinstance(req, CreateTopicsRequest)
        if node.node_id != 2:
            controller["id"] = 2
            return CreateTopicsResponse(topics=[CreatableTopicResult(
                name=t.name, error_code=ErrorCode.NOT_CONTROLLER) for t in req.topics])
        return CreateTopicsResponse(topics=[CreatableTopicResult(
            name=t.name, num_partitions=3) for t in req.topics])

    async with cluster_of(3, handle) as started:
        nodes.extend(started)
        async with asyncio.timeout(BOUND_S), Admin(nodes[0].address, retry_backoff_ms=1,
                                                   request_timeout_ms=4000) as admin:
            assert await admin.create_topics("t", 3) == {"t": 3}
    assert [len(n.sent(CreateTopicsRequest)) for n in nodes] == [0, 1, 1]


async def test_heartbeats_find_a_moved_coordinator_and_keep_the_member_id() -> None:
    coordinator = {"id": 1}
    moved = asyncio.Event()
    nodes: list[ScriptedNode] = []

    def handle(node: ScriptedNode, req: Request) -> Response:
        if isinstance(req, MetadataRequest):
            return metadata(nodes, {"t": [1]}, controller_id=1)
        if isinstance(req, FindCoordinatorRequest):
            c = nodes[coordinator["id"] - 1]
            return FindCoordinatorResponse(node_id=c.node_id, host=c.host, port=c.port)
        if isinstance(req, JoinGroupRequest):
            return JoinGroupResponse(generation_id=7, protocol_name="range", leader="other",
                                     member_id="m-1")
        if isinstance(req, HeartbeatRequest):
            if node.node_id != coordinator["id"]:
                return HeartbeatResponse(error_code=ErrorCode.NOT_COORDINATOR)
            if node.node_id == 1:
                coordinator["id"] = 2   # the offsets partition's leadership moves
                return HeartbeatResponse(error_code=ErrorCode.NOT_COORDINATOR)
            moved.set()
            return HeartbeatResponse()
        if isinstance(req, JoinGroupRequest | SyncGroupResponse):
            raise AssertionError(req)
        return response_type_for(req)()

    async with cluster_of(2, handle) as started:
        nodes.extend(started)
        async with asyncio.timeout(BOUND_S), Consumer(
                nodes[0].address, group_id="g", heartbeat_interval_ms=20,
                session_timeout_ms=10000, retry_backoff_ms=1,
                enable_auto_commit=False) as consumer:
            consumer.subscribe(["t"])
            while not moved.is_set():
                await consumer.getmany(timeout_ms=20)
            assert (consumer.member_id, consumer.generation_id) == ("m-1", 7)
    first, second = nodes
    beat = second.sent(HeartbeatRequest)[0]
    assert (beat.member_id, beat.generation_id) == ("m-1", 7)  # type: ignore[attr-defined]
    assert not second.sent(JoinGroupRequest) and len(first.sent(JoinGroupRequest)) == 1
