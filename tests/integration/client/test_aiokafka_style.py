"""The SDK as an aiokafka user writes it, against a real broker (issue 25): topics and
``bootstrap_servers`` in the Consumer's constructor, deserializers, and a subscription
to a topic that does not exist, which is warned of once (``missing_topics="wait"``) or
fails the polls (``missing_topics="fail"``) instead of waiting without a word."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest

from groupwire import Admin, Consumer, Producer
from groupwire.broker.server import Broker
from groupwire.errors import RecordDeserializationError, UnknownTopicOrPartitionError
from tests.integration.client.test_consumer import FAST

WARNINGS = "groupwire.consumer"


def _missing_warnings(caplog: pytest.LogCaptureFixture, topic: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == WARNINGS and r.levelno == logging.WARNING
            and repr(topic) in r.getMessage() and "do not exist" in r.getMessage()]


async def test_consumer_written_as_for_aiokafka_reads_deserialized_records(
        bootstrap: str, admin: Admin) -> None:
    await admin.create_topics(["orders"], num_partitions=1)
    async with Producer(bootstrap_servers=bootstrap, key_serializer=str.encode,
                        value_serializer=lambda v: json.dumps(v).encode()) as p, \
            Producer(bootstrap_servers=bootstrap) as raw:
        for n in range(2):
            await p.send_and_wait("orders", {"n": n}, key=f"k{n}")
        await raw.send_and_wait("orders", b"{", key=b"bad")
        await (await p.send("orders", value=None, key="k3"))  # serializer sees None: b"null"
        await raw.send_and_wait("orders", None, key=b"tombstone")
    got: list[tuple[str | None, Any]] = []
    consumer = Consumer("orders", bootstrap_servers=bootstrap, group_id="aio",
                        key_deserializer=bytes.decode, value_deserializer=json.loads, **FAST)
    async with consumer:
        async with asyncio.timeout(10):
            async for record in consumer:
                got.append((record.key, record.value))
                if len(got) == 2:
                    break
            with pytest.raises(RecordDeserializationError) as info:
                await consumer.getmany(timeout_ms=5000)
            err = info.value
            assert (err.topic_partition.topic, err.topic_partition.partition,
                    err.offset) == ("orders", 0, 2)
            assert "orders[0] offset 2" in str(err) and isinstance(err.__cause__, ValueError)
            consumer.seek(err.topic_partition, err.offset + 1)
            while len(got) < 4:
                for records in (await consumer.getmany(timeout_ms=5000)).values():
                    got += [(r.key, r.value) for r in records]
    assert got == [("k0", {"n": 0}), ("k1", {"n": 1}), ("k3", None), ("tombstone", None)]


async def test_a_missing_topic_is_warned_of_once_naming_it_and_the_group(
        bootstrap: str, admin: Admin, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=WARNINGS)
    consumer = Consumer("not-yet", bootstrap_servers=bootstrap, group_id="patient",
                        metadata_max_age_ms=100, **FAST)
    async with consumer:
        async with asyncio.timeout(10):
            while not _missing_warnings(caplog, "not-yet"):
                assert await consumer.getmany(timeout_ms=100) == {}
            # several metadata checks later: still the one warning
            checks = consumer._metadata
            for _ in range(5):
                read_at = checks._read_at_ms
                while checks._read_at_ms == read_at:
                    assert await consumer.getmany(timeout_ms=50) == {}
        [warning] = _missing_warnings(caplog, "not-yet")
        assert "'patient'" in warning
        await admin.create_topics(["not-yet"], num_partitions=1)
        async with Producer(bootstrap_servers=bootstrap) as p:
            await p.send_and_wait("not-yet", b"late")
        async with asyncio.timeout(15):   # it waited for the topic, as promised
            record = await consumer.getone()
        assert record.value == b"late"
        assert any("exist now" in r.getMessage() for r in caplog.records)
        await admin.delete_topics(["not-yet"])
        async with asyncio.timeout(15):  # gone again: warned again
            while len(_missing_warnings(caplog, "not-yet")) < 2:
                await consumer.getmany(timeout_ms=50)


async def test_missing_topics_fail_raises_from_the_polls_until_the_topic_exists(
        bootstrap: str, admin: Admin, broker: Broker) -> None:
    consumer = Consumer("orders", "absent", bootstrap_servers=bootstrap, group_id="strict",
                        missing_topics="fail", **FAST)
    await admin.create_topics(["orders"], num_partitions=1)
    async with consumer:
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            await consumer.getmany(timeout_ms=10_000)
        took = time.monotonic() - started
        assert took < 2, f"the first poll waited {took:.2f} s"
        text = str(info.value)
        assert "'absent'" in text and "'orders'" not in text and "'strict'" in text
        with pytest.raises(UnknownTopicOrPartitionError):
            await consumer.getone()
        with pytest.raises(UnknownTopicOrPartitionError):
            async for _ in consumer:
                pass
        await admin.create_topics(["absent"], num_partitions=1)
        async with asyncio.timeout(10):  # polls read again: the failures end
            while True:
                try:
                    await consumer.getmany(timeout_ms=50)
                    break
                except UnknownTopicOrPartitionError:
                    await asyncio.sleep(0.02)
            assert consumer._metadata.missing == frozenset()
