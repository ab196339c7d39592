"""``--kafka-produce-validation``: what a produced Kafka batch must pass to be stored.

A batch whose records do not add up to its count is refused where its records are walked,
as Kafka refuses it: every batch with ``strict``, uncompressed ones with ``relaxed`` (the
default); with ``crc`` only headers and CRCs are checked, so it is stored. Whatever the
mode, a batch whose CRC is wrong is refused and nothing of it is stored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import cramjam
import pytest

from groupwire.broker.server import Broker
from groupwire.protocol.batches import BatchRecord
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.kafka.records import COMPRESSION_LZ4, encode_batch
from tests.integration.kafka_door.test_connection import RawKafka
from tests.unit.protocol.kafka.kafka_batch_tools import record, reframe

PRODUCE, CREATE_TOPICS, LIST_OFFSETS = 0, 19, 2

GOOD = encode_batch([BatchRecord(value=b"v%d" % i, timestamp_ms=1) for i in range(3)],
                    compression=COMPRESSION_LZ4)
SHORT = reframe(encode_batch([BatchRecord(value=b"v", timestamp_ms=1)] * 2),
                records=record(0))
"""Uncompressed, counted 2, holds 1: only a walk of its records sees it."""
SHORT_LZ4 = reframe(GOOD, records=cramjam.lz4.compress(record(0)).read())
"""The same in an lz4 frame, counted 3."""
BAD_CRC = GOOD[:-1] + bytes([GOOD[-1] ^ 0xFF])


async def _produce(client: RawKafka, batch: bytes) -> int:
    answer = await client.call(PRODUCE, 8, {"transactional_id": None, "acks": 1,
                                            "timeout_ms": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": batch}]}]})
    code: int = answer["responses"][0]["partition_responses"][0]["error_code"]
    return code


async def _end_offset(client: RawKafka) -> int:
    answer = await client.call(LIST_OFFSETS, 5, {
        "replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                          "timestamp": -1}]}]})
    offset: int = answer["topics"][0]["partitions"][0]["offset"]
    return offset


@pytest.mark.parametrize(("validation", "refused", "stored"), [
    ("strict", {"uncompressed", "lz4"}, 3),
    ("relaxed", {"uncompressed"}, 6),
    ("crc", set(), 8),
])
async def test_what_each_validation_stores(start_broker: Callable[..., Awaitable[Broker]],
                                           validation: str, refused: set[str],
                                           stored: int) -> None:
    broker = await start_broker(kafka_produce_validation=validation)
    client = await RawKafka.open(broker.port)
    try:
        made = await client.call(CREATE_TOPICS, 4, {
            "topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 5000, "validate_only": False})
        assert made["topics"][0]["error_code"] == 0
        assert await _produce(client, GOOD) == ErrorCode.NONE
        codes = {"uncompressed": await _produce(client, SHORT),
                 "lz4": await _produce(client, SHORT_LZ4)}
        assert {kind for kind, code in codes.items() if code} == refused
        assert set(codes.values()) <= {ErrorCode.NONE, ErrorCode.INVALID_RECORD,
                                       ErrorCode.CORRUPT_MESSAGE}
        assert await _produce(client, BAD_CRC) == ErrorCode.CORRUPT_MESSAGE
        assert await _end_offset(client) == stored
    finally:
        client.writer.close()
