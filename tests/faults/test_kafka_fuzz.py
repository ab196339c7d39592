"""Random and mutated Kafka frames, for every API the Kafka door serves, on ~20 connections
against a live broker while a group heartbeats on another: no request crashes the door
(no translator failure, no UNKNOWN_SERVER_ERROR answer), the group stays Stable, and the
broker still answers Kafka and msgpack clients afterwards (docs/protocol.md §13)."""

from __future__ import annotations

import asyncio
import random
import struct

from groupwire.client.connection import Connection
from groupwire.protocol.batches import BatchRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka.codec import SERVED, decode_response, encode_request, with_size
from groupwire.protocol.kafka.records import encode_batch
from tests.integration.rawgroup import RawMember, create_topic, round_robin

from .conftest import StartBroker
from .test_fuzz import _heartbeat_until

CONNECTIONS = 20
ROUNDS = 6
FRAMES_PER_CONNECTION = 12
STEADY_GROUP = "the-steady-group-under-kafka-fuzz"
SENTINEL_CID = 2_000_000_000
API_VERSIONS = 18

_BATCH = encode_batch([BatchRecord(value=b"v", key=b"k", timestamp_ms=1)])
_BODIES: dict[int, dict[str, object]] = {
    0: {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "fuzz", "partition_data": [{"index": 0, "records": _BATCH}]}]},
    1: {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [
        {"topic": "fuzz", "partitions": [{"partition": 0, "fetch_offset": 0,
                                          "partition_max_bytes": 1 << 20}]}]},
    3: {"topics": None},
    8: {"group_id": "fz", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": "fuzz", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
    11: {"group_id": "fz", "session_timeout_ms": 6000, "rebalance_timeout_ms": 1000,
         "member_id": "", "protocol_type": "consumer",
         "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"}]},
    12: {"group_id": "fz", "generation_id": 1, "member_id": "m"},
    19: {"topics": [{"name": "fuzz-new", "num_partitions": 1, "replication_factor": 1}],
         "timeout_ms": 1000},
    32: {"resources": [{"resource_type": 2, "resource_name": "fuzz"}]},
}
"""Bodies with content for the APIs whose work is deepest; every other API is sent with
its schema's defaults (empty arrays, zeros), itself a request the door must answer."""


def _valid(rng: random.Random) -> bytes:
    api_key = rng.choice(sorted(SERVED))
    low, high = SERVED[api_key]
    version = rng.randint(low, high)
    body = _BODIES.get(api_key, {})
    try:
        return encode_request(api_key, version, rng.randrange(1, 1 << 30), "fz", body)
    except Exception:  # a body field this version lacks the shape for: defaults instead
        return encode_request(api_key, version, rng.randrange(1, 1 << 30), "fz", {})


def _fuzz_frame(rng: random.Random) -> bytes:
    """One hostile Kafka frame: a valid request of any served API at any served version,
    or one mutated; a header naming an API or version not served; random bytes."""
    kind = rng.randrange(7)
    if kind == 0:  # starts like a Kafka request, then noise
        return with_size(b"\x00" + rng.randbytes(rng.randrange(1, 64)))
    if kind == 1:  # an api key / version nobody serves, a plausible header after it
        header = struct.pack(">hhih", rng.randrange(0, 100), rng.randrange(0, 20),
                             rng.randrange(1 << 30), 2) + b"fz"
        return with_size(header + rng.randbytes(rng.randrange(0, 16)))
    payload = bytearray(_valid(rng))
    if kind == 2:  # flip a few bits (not the api key's first byte: that one picks the door)
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(1, len(payload))
            payload[at] ^= 1 << rng.randrange(8)
    elif kind == 3:  # cut short, framed as if whole
        del payload[rng.randrange(2, len(payload)):]
    elif kind == 4:  # a length prefix that lies
        return struct.pack(">I", len(payload) + rng.randrange(1, 1 << 30)) + bytes(payload)
    elif kind == 5:  # trailing garbage
        payload += rng.randbytes(rng.randrange(1, 8))
    return with_size(bytes(payload))  # kind 6: the valid request itself


async def _hostile_connection(port: int, rng: random.Random) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(with_size(encode_request(API_VERSIONS, 0, 1, "fz", {})))  # the door
        # valid requests of any API and version first (a bad frame closes the connection,
        # so what follows it would never be read), then one hostile frame
        for _ in range(FRAMES_PER_CONNECTION):
            writer.write(with_size(_valid(rng)))
        writer.write(_fuzz_frame(rng))
        writer.write(with_size(encode_request(API_VERSIONS, 0, SENTINEL_CID, "fz", {})))
        await writer.drain()
        async with asyncio.timeout(3):  # the sentinel's answer, or the broker hangs up
            while True:
                (n,) = struct.unpack(">i", await reader.readexactly(4))
                payload = await reader.readexactly(n)
                if struct.unpack(">i", payload[:4])[0] == SENTINEL_CID:
                    break
    except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
        pass
    finally:
        writer.close()


async def test_fuzzed_kafka_connections_leave_the_group_and_the_door_alone(
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
    rng = random.Random(20261129)
    try:
        for _ in range(ROUNDS):
            seeds = [rng.randrange(2**32) for _ in range(CONNECTIONS)]
            await asyncio.gather(*(_hostile_connection(broker.port, random.Random(s))
                                   for s in seeds))
    finally:
        stop.set()
        await beats

    assert codes and all(c == ErrorCode.NONE for c in codes), set(codes)
    assert member.generation_id == generation
    registry = broker.metrics.registry
    crashed = registry.get_sample_value("groupwire_connections_closed_total",
                                        {"reason": "internal-error"})
    assert not crashed, f"{crashed} connections closed by a translator failure"
    for api in ("Produce", "Fetch", "Metadata", "JoinGroup", "OffsetCommit",
                "DescribeConfigs", "CreateTopics", "ListOffsets", "OffsetFetch"):
        server_errors = registry.get_sample_value(
            "groupwire_requests_total", {"api": api, "error": "UNKNOWN_SERVER_ERROR"})
        assert not server_errors, f"{api}: {server_errors} UNKNOWN_SERVER_ERROR answers"
    # the door still serves a well-behaved Kafka client
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    writer.write(with_size(encode_request(API_VERSIONS, 3, 7, "after", {})))
    (n,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
    cid, body = decode_response(API_VERSIONS, 3, await reader.readexactly(n))
    assert (cid, body["error_code"]) == (7, 0)
    writer.close()
    await asyncio.wait_for(broker.wait_connections(at_most=2), 10)
    await member.conn.close()
    await admin.close()
