"""Random and mutated frames on ~20 connections against a live broker while a group
heartbeats on another: the broker keeps answering, the group stays Stable, and memory
stays bounded once warmed up."""

from __future__ import annotations

import asyncio
import random
import struct
from pathlib import Path

import msgpack

from groupwire.broker.server import Broker
from groupwire.client.connection import Connection
from groupwire.protocol.batches import BatchRecord, encode_batch
from groupwire.protocol.codec import encode_request
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    CreatableTopic,
    CreateTopicsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    PartitionProduceData,
    ProduceRequest,
    Request,
    TopicProduceData,
)
from tests.integration.rawgroup import RawMember, create_topic, round_robin

from .conftest import StartBroker

CONNECTIONS = 20
ROUNDS = 12
FRAMES_PER_CONNECTION = 12
STEADY_GROUP = "the-steady-group-under-test"
SENTINEL_CID = 2_000_000_000
RSS_GROWTH_LIMIT_KB = 48 * 1024

_VALID: list[Request] = [
    ApiVersionsRequest(),
    MetadataRequest(topics=None),
    HeartbeatRequest(group_id="fz", generation_id=1, member_id="m"),
    JoinGroupRequest(group_id="fz", member_id="", session_timeout_ms=6000,
                     rebalance_timeout_ms=1000, protocol_type="consumer",
                     protocols=[JoinGroupRequestProtocol(name="range", metadata=b"\x90")]),
    OffsetCommitRequest(group_id="fz", generation_id=-1, member_id="", topics=[
        OffsetCommitRequestTopic(name="fuzz", partitions=[
            OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]),
    FetchRequest(max_wait_ms=0, topics=[FetchTopic(
        topic="fuzz", partitions=[FetchPartition(partition=0, fetch_offset=0)])]),
    ProduceRequest(topic_data=[TopicProduceData(name="fuzz", partition_data=[
        PartitionProduceData(index=0, records=encode_batch(
            [BatchRecord(value=b"v", key=None, timestamp_ms=1)]))])]),
    CreateTopicsRequest(topics=[CreatableTopic(name="fuzz-new", num_partitions=1)]),
]


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def _framed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _fuzz_frame(rng: random.Random) -> bytes:
    """One hostile frame: random bytes, random msgpack, or a valid request mutated."""
    kind = rng.randrange(6)
    if kind == 0:
        return _framed(rng.randbytes(rng.randrange(1, 64)))
    if kind == 1:
        atoms: list[object] = [None, -1, 2**40, "x" * rng.randrange(20), [], {}, b"\x00"]
        junk = [rng.choice(atoms) for _ in range(rng.randrange(7))]
        return _framed(msgpack.packb(junk, use_bin_type=True))
    payload = bytearray(encode_request(rng.randrange(1, 1000), rng.choice(_VALID), "fz"))
    if kind == 2:  # flip a few bits
        for _ in range(rng.randrange(1, 4)):
            payload[rng.randrange(len(payload))] ^= 1 << rng.randrange(8)
    elif kind == 3:  # cut short, framed as if whole
        del payload[rng.randrange(1, len(payload)):]
    elif kind == 4:  # a length prefix that lies (too long: the broker waits or refuses)
        return struct.pack(">I", len(payload) + rng.randrange(1, 1 << 30)) + bytes(payload)
    return _framed(bytes(payload))  # kind 5: the valid request itself


async def _hostile_connection(port: int, rng: random.Random) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(FRAMES_PER_CONNECTION):
            writer.write(_fuzz_frame(rng))
        writer.write(_framed(encode_request(SENTINEL_CID, ApiVersionsRequest(), "fz")))
        await writer.drain()
        # Read until the sentinel's answer or the broker hangs up; either is fine.
        async with asyncio.timeout(3):
            while True:
                (n,) = struct.unpack(">I", await reader.readexactly(4))
                answer = msgpack.unpackb(await reader.readexactly(n), raw=False)
                if answer[0] == SENTINEL_CID:
                    break
    except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
        pass
    finally:
        writer.close()


async def _heartbeat_until(member: RawMember, stop: asyncio.Event, codes: list[int]) -> None:
    while not stop.is_set():
        codes.append((await member.heartbeat()).error_code)
        await asyncio.sleep(0.02)


async def _round(broker: Broker, rng: random.Random) -> None:
    seeds = [rng.randrange(2**32) for _ in range(CONNECTIONS)]
    await asyncio.gather(*(_hostile_connection(broker.port, random.Random(s))
                           for s in seeds))


async def test_fuzzed_connections_leave_the_group_and_memory_alone(
        start_broker: StartBroker) -> None:
    broker = await start_broker(frame_read_timeout_ms=300)
    admin = await Connection.open("127.0.0.1", broker.port, client_id="admin")
    await create_topic(admin, "fuzz", 1)
    await create_topic(admin, "steady", 2)
    member = RawMember(await Connection.open("127.0.0.1", broker.port), STEADY_GROUP,
                       ["steady"], session_timeout_ms=2000)
    assert (await member.join_group()).error_code == ErrorCode.NONE
    plan = round_robin([member.member_id], "steady", 2)
    assert (await member.sync(plan)).error_code == ErrorCode.NONE
    generation = member.generation_id

    stop = asyncio.Event()
    codes: list[int] = []
    beats = asyncio.ensure_future(_heartbeat_until(member, stop, codes))
    rng = random.Random(20261122)
    try:
        for _ in range(3):  # warm-up: code paths, caches and allocator pools settle
            await _round(broker, rng)
        baseline = _rss_kb()
        for _ in range(ROUNDS):
            await _round(broker, rng)
        grown = _rss_kb() - baseline
    finally:
        stop.set()
        await beats

    assert codes and all(c == ErrorCode.NONE for c in codes), set(codes)
    described = await admin.send(DescribeGroupsRequest(groups=[STEADY_GROUP]),
                                 response_type=DescribeGroupsResponse)
    assert described.groups[0].group_state == "Stable"
    assert member.generation_id == generation
    accepted = broker.metrics.registry.get_sample_value("groupwire_connections_accepted_total")
    assert accepted is not None and accepted >= CONNECTIONS * (ROUNDS + 3)
    assert grown < RSS_GROWTH_LIMIT_KB, f"RSS grew {grown} kB after warm-up"
    # every hostile connection is gone; only the two clients remain
    await asyncio.wait_for(broker.wait_connections(at_most=2), 10)
    assert broker.connection_count == 2
    await member.conn.close()
    await admin.close()
