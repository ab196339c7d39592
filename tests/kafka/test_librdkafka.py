"""confluent-kafka (librdkafka) with its default settings against the Kafka door."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from groupwire import Consumer as GroupwireConsumer
from groupwire import Producer as GroupwireProducer
from groupwire.protocol.hashing import partition_for_key

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the dev extra")
admin_mod = pytest.importorskip("confluent_kafka.admin")

TIMEOUT_S = 30


def _admin(bootstrap: str) -> Any:
    return admin_mod.AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = _admin(bootstrap)  # kept: a collected client cancels what it was doing
    futures = admin.create_topics(
        [admin_mod.NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(TIMEOUT_S)


def _consume(bootstrap: str, topic: str, group: str, count: int,
             **config: Any) -> list[Any]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "auto.offset.reset": "earliest", **config})
    consumer.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def test_metadata_names_the_broker_at_the_address_clients_used(bootstrap: str,
                                                                name: str) -> None:
    _create(bootstrap, name, partitions=4)
    metadata = _admin(bootstrap).list_topics(timeout=TIMEOUT_S)
    brokers = [(b.host, b.port) for b in metadata.brokers.values()]
    host, port = bootstrap.split(":")
    assert brokers == [(host, int(port))]
    topic = metadata.topics[name]
    assert topic.error is None
    assert sorted(topic.partitions) == [0, 1, 2, 3]
    leader = next(iter(metadata.brokers))
    assert {p.leader for p in topic.partitions.values()} == {leader}


def test_a_duplicate_topic_is_refused_as_topic_already_exists(bootstrap: str,
                                                               name: str) -> None:
    _create(bootstrap, name)
    admin = _admin(bootstrap)
    futures = admin.create_topics(
        [admin_mod.NewTopic(name, num_partitions=3, replication_factor=1)])
    with pytest.raises(ck.KafkaException) as caught:
        futures[name].result(TIMEOUT_S)
    assert caught.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_then_consume_in_a_group_keeps_every_field(bootstrap: str, name: str,
                                                            codec: str) -> None:
    _create(bootstrap, name, partitions=3)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                            "partitioner": "murmur2_random", "linger.ms": 5})
    sent: dict[bytes, tuple[bytes, int, list[tuple[str, bytes]]]] = {}
    delivered: list[Any] = []
    for i in range(300):
        key, value = f"k{i}".encode(), f"value {i}".encode() * 3
        headers = [("n", str(i).encode()), ("codec", codec.encode())]
        ts = 1_700_000_000_000 + i
        sent[key] = (value, ts, headers)
        producer.produce(name, value, key, headers=headers, timestamp=ts,
                         on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(TIMEOUT_S) == 0
    assert [err for err, _ in delivered if err is not None] == []
    got = _consume(bootstrap, name, f"g-{name}", len(sent))
    assert len(got) == len(sent)
    for msg in got:
        value, ts, headers = sent[msg.key()]
        assert msg.value() == value
        assert msg.timestamp() == (ck.TIMESTAMP_CREATE_TIME, ts)
        assert msg.headers() == headers
        # Kafka's murmur2 partitioner and groupwire's SDK place a key alike
        assert msg.partition() == partition_for_key(msg.key(), 3)
    offsets = {(m.partition(), m.offset()) for m in got}
    assert len(offsets) == len(got)


def test_records_cross_between_the_doors(bootstrap: str, name: str) -> None:
    """One log, two protocols: what librdkafka writes the SDK reads, and back."""
    _create(bootstrap, name, partitions=1)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4"})
    for i in range(50):
        producer.produce(name, f"from-kafka-{i}".encode(), f"k{i}".encode(),
                         headers=[("door", b"kafka")], timestamp=1_700_000_000_000 + i)
    assert producer.flush(TIMEOUT_S) == 0

    async def through_the_sdk() -> list[Any]:
        async with GroupwireProducer(bootstrap_servers=bootstrap) as sdk_producer:
            for i in range(50):
                await sdk_producer.send_and_wait(
                    name, f"from-sdk-{i}".encode(), key=f"s{i}".encode(),
                    headers=[("door", b"msgpack")], timestamp_ms=1_700_000_001_000 + i)
        got: list[Any] = []
        async with GroupwireConsumer(name, bootstrap_servers=bootstrap,
                                     group_id=f"sdk-{name}",
                                     auto_offset_reset="earliest") as consumer:
            while len(got) < 100:
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    got.extend(records)
        return got

    sdk_seen = asyncio.run(through_the_sdk())
    kafka_seen = _consume(bootstrap, name, f"rdk-{name}", 100)
    by_offset = {m.offset(): m for m in kafka_seen}
    assert len(sdk_seen) == len(by_offset) == 100
    for record in sdk_seen:
        msg = by_offset[record.offset]
        assert (msg.key(), msg.value()) == (record.key, record.value)
        assert msg.timestamp()[1] == record.timestamp_ms
        assert msg.headers() == list(record.headers)
