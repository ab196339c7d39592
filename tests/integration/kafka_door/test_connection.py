"""The Kafka door's connection rules, with raw Kafka frames on an in-process broker.

Real clients test the APIs (tests/kafka); here the rules only a hand-made frame can
reach: what ApiVersions advertises and its fallback, answers in request order, acks=0,
a request nobody serves, and both doors on one port.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from groupwire import Producer
from groupwire.broker.server import Broker
from groupwire.client.admin import Admin
from groupwire.protocol.kafka.codec import SERVED, decode_response, encode_request, with_size

API_VERSIONS, METADATA, PRODUCE, FETCH = 18, 3, 0, 1


class RawKafka:
    """Frames in and out, nothing else: what the door answers is read byte for byte."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.next_id = 1

    @classmethod
    async def open(cls, port: int) -> RawKafka:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        cid = self.next_id
        self.next_id += 1
        self.writer.write(with_size(encode_request(api_key, version, cid, "raw", body)))
        return cid

    async def receive(self, api_key: int, version: int) -> tuple[int, dict[str, Any]]:
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 10))[0]
        payload = await asyncio.wait_for(self.reader.readexactly(size), 10)
        return decode_response(api_key, version, payload)

    async def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        cid = self.send(api_key, version, body)
        got, answer = await self.receive(api_key, version)
        assert got == cid
        return answer


@pytest.fixture
async def raw(broker: Broker) -> AsyncIterator[Callable[[], Awaitable[RawKafka]]]:
    opened: list[asyncio.StreamWriter] = []

    async def open_one() -> RawKafka:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        opened.append(writer)
        return RawKafka(reader, writer)

    yield open_one
    for writer in opened:
        writer.close()


async def test_api_versions_advertises_what_is_served(raw: Callable[[], Awaitable[RawKafka]],
                                                      broker: Broker) -> None:
    client = await raw()
    answer = await client.call(API_VERSIONS, 3, {"client_software_name": "raw",
                                                 "client_software_version": "1"})
    assert answer["error_code"] == 0
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert ranges == broker.kafka_door.advertised
    assert ranges[API_VERSIONS] == SERVED[API_VERSIONS]
    assert ranges[PRODUCE] == (0, 8) and ranges[FETCH] == (4, 11)
    assert all(key in SERVED for key in ranges)


async def test_an_api_versions_version_not_served_gets_the_ranges_in_v0s_shape(
        raw: Callable[[], Awaitable[RawKafka]], broker: Broker) -> None:
    client = await raw()
    # as a client newer than the broker asks: header v2, a version past the served range
    payload = struct.pack(">hhi", API_VERSIONS, 9, 77) + struct.pack(">h", 3) + b"new" + b"\x00"
    client.writer.write(struct.pack(">i", len(payload) + 1) + payload + b"\x00")
    cid, answer = await client.receive(API_VERSIONS, 0)
    assert cid == 77
    assert answer["error_code"] == 35
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert ranges == broker.kafka_door.advertised
    # and the connection goes on: the client retries with a served version
    retry = await client.call(API_VERSIONS, 0, {})
    assert retry["error_code"] == 0


async def test_a_request_nobody_serves_closes_the_connection_and_others_carry_on(
        raw: Callable[[], Awaitable[RawKafka]]) -> None:
    client, neighbour = await raw(), await raw()
    # api key 44 (IncrementalAlterConfigs) is no API this broker serves
    payload = struct.pack(">hhih", 44, 0, 5, 3) + b"raw" + b"\x00\x00\x00\x00"
    client.writer.write(struct.pack(">i", len(payload)) + payload)
    assert await asyncio.wait_for(client.reader.read(), 10) == b""
    assert (await neighbour.call(API_VERSIONS, 2, {}))["error_code"] == 0


async def test_both_doors_on_one_port_and_a_first_frame_arriving_a_byte_at_a_time(
        raw: Callable[[], Awaitable[RawKafka]], broker: Broker) -> None:
    client = await raw()
    frame = with_size(encode_request(API_VERSIONS, 2, 9, "slow", {}))
    for i in range(len(frame)):
        client.writer.write(frame[i:i + 1])
        await client.writer.drain()
    cid, answer = await client.receive(API_VERSIONS, 2)
    assert (cid, answer["error_code"]) == (9, 0)
    async with Admin(f"127.0.0.1:{broker.port}", request_timeout_ms=5000) as admin:
        await admin.create_topics("both-doors", 1)
        assert "both-doors" in await admin.list_topics()
    metadata = await client.call(METADATA, 8, {"topics": [{"name": "both-doors"}],
                                              "allow_auto_topic_creation": False})
    assert [t["name"] for t in metadata["topics"]] == ["both-doors"]
    assert broker.connection_count == 1  # the SDK's connections are closed; this one stays


async def test_a_first_frame_that_stops_short_is_closed_at_the_frame_read_timeout(
        start_broker: Callable[..., Awaitable[Broker]]) -> None:
    broker = await start_broker(frame_read_timeout_ms=100)
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    writer.write(b"\x00\x00\x00")
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()


async def test_without_kafka_on_listeners_a_kafka_frame_is_refused(
        start_broker: Callable[..., Awaitable[Broker]]) -> None:
    broker = await start_broker(kafka_on_listeners=False)
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    writer.write(with_size(encode_request(API_VERSIONS, 2, 1, "c", {})))
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()


async def test_a_kafka_listener_serves_kafka_alone_and_metadata_names_it(
        start_broker: Callable[..., Awaitable[Broker]]) -> None:
    broker = await start_broker(
        kafka_listeners="PLAINTEXT://127.0.0.1:0",
        kafka_advertised_listeners="PLAINTEXT://kafka.example:0")
    port = broker.listener_ports["KAFKA_PLAINTEXT"]
    assert port != broker.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    client = RawKafka(reader, writer)
    metadata = await client.call(METADATA, 8, {"topics": None})
    assert [(b["host"], b["port"]) for b in metadata["brokers"]] == [("kafka.example", port)]
    coordinator = await client.call(10, 2, {"key": "g", "key_type": 0})
    assert (coordinator["host"], coordinator["port"]) == ("kafka.example", port)
    writer.close()
    # and the client listener's Kafka clients are told the client listener
    plain = await RawKafka.open(broker.port)
    metadata = await plain.call(METADATA, 8, {"topics": None})
    assert [(b["host"], b["port"]) for b in metadata["brokers"]] == [("127.0.0.1", broker.port)]
    plain.writer.close()


async def test_metadata_behind_a_waiting_fetch_is_read_when_its_answer_can_go(
        raw: Callable[[], Awaitable[RawKafka]], broker: Broker) -> None:
    """Kafka reads a connection's requests one at a time; the door reads a Metadata only
    once the answers before it have gone, so it never names a stale cluster."""
    bootstrap = f"127.0.0.1:{broker.port}"
    async with Admin(bootstrap, request_timeout_ms=5000) as admin:
        await admin.create_topics("waited-on", 1)
        client = await raw()
        fetch_cid = client.send(FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 30_000, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": "waited-on", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        metadata_cid = client.send(METADATA, 8, {"topics": None})
        await admin.create_topics("created-meanwhile", 1)
    async with Producer(bootstrap) as producer:  # wakes the fetch
        await producer.send_and_wait("waited-on", b"wake")
    cid, fetched = await client.receive(FETCH, 11)
    assert cid == fetch_cid and fetched["responses"][0]["partitions"][0]["records"]
    cid, metadata = await client.receive(METADATA, 8)
    assert cid == metadata_cid
    assert "created-meanwhile" in {t["name"] for t in metadata["topics"]}
