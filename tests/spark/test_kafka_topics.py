"""The Spark source reads what Kafka's own clients wrote through the Kafka door
(docs/protocol.md §13.4): compressed Kafka batches come back as the same records, beside
the SDK's, one log for both doors."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import pytest

from tests.spark.conftest import SparkBroker
from tests.spark.helpers import create_topic, produce, unique_topic

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")
ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the dev extra")


def test_a_batch_read_returns_records_librdkafka_wrote_beside_the_sdks(
        spark: Any, spark_broker: SparkBroker) -> None:
    topic = unique_topic("kafka-door")
    create_topic(spark_broker.bootstrap, topic, 2)
    producer = ck.Producer({"bootstrap.servers": spark_broker.bootstrap,
                            "compression.type": "zstd", "partitioner": "murmur2_random"})
    for i in range(100):
        producer.produce(topic, f"kafka {i}".encode(), f"k{i}".encode(),
                         headers=[("door", b"kafka")], timestamp=1_700_000_000_000 + i)
    assert producer.flush(30) == 0
    produce(spark_broker.bootstrap, topic, [f"sdk {i}".encode() for i in range(20)])

    rows = (spark.read.format("groupwire").option("bootstrap", spark_broker.bootstrap)
            .option("subscribe", topic).load().collect())
    assert len(rows) == 120
    kafka_rows = {r.key: r for r in rows if r.value.startswith(b"kafka ")}
    assert len(kafka_rows) == 100
    for i in range(100):
        row = kafka_rows[f"k{i}".encode()]
        assert row.value == f"kafka {i}".encode()
        assert [(h.key, h.value) for h in row.headers] == [("door", b"kafka")]
        stamp = row.timestamp.replace(tzinfo=UTC)  # the session's time zone is UTC
        assert int(stamp.timestamp() * 1000) == 1_700_000_000_000 + i
    for p in range(2):  # one log: offsets contiguous across both doors' batches
        offsets = sorted(r.offset for r in rows if r.partition == p)
        assert offsets == list(range(len(offsets)))
