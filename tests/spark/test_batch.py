"""Batch reads: every record of the range exactly once, with Spark Kafka's columns."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.spark.conftest import SparkBroker
from tests.spark.helpers import create_topic, produce, unique_topic

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")


def read(spark: Any, broker: SparkBroker, **options: str) -> Any:
    reader = spark.read.format("groupwire").option("bootstrap", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_read_returns_every_record_once_with_kafka_columns(
        spark: Any, spark_broker: SparkBroker) -> None:
    topic = unique_topic("batch")
    create_topic(spark_broker.bootstrap, topic, 3)
    values = [f"v{i}".encode() for i in range(300)]
    before = datetime.now(UTC).replace(microsecond=0)
    placed = produce(spark_broker.bootstrap, topic, values)
    produce(spark_broker.bootstrap, topic, [b"with-headers"], partition=1, keyed=False,
            headers=[("trace", b"\x01"), ("empty", None)])

    df = read(spark, spark_broker, subscribe=topic)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,headers:array<struct<key:string,value:binary>>>")
    rows = df.collect()
    assert len(rows) == 301
    got = {(r.partition, r.offset): r for r in rows}
    assert len(got) == 301  # no record twice
    for value, (part, off) in zip(values, placed, strict=True):
        row = got[(part, off)]
        assert (row.key, row.value, row.topic) == (value, value, topic)
        assert row.headers == []
        assert row.timestamp.replace(tzinfo=UTC) >= before
    extra = [r for r in rows if r.value == b"with-headers"]
    assert len(extra) == 1 and extra[0].key is None and extra[0].partition == 1
    assert [(h.key, h.value) for h in extra[0].headers] == [("trace", b"\x01"),
                                                            ("empty", None)]
    # Offsets of each partition are contiguous from 0: nothing skipped.
    for p in range(3):
        offs = sorted(off for part, off in got if part == p)
        assert offs == list(range(len(offs)))


def test_json_offsets_and_min_partitions_read_exactly_the_range(
        spark: Any, spark_broker: SparkBroker) -> None:
    topic = unique_topic("range")
    create_topic(spark_broker.bootstrap, topic, 2)
    produce(spark_broker.bootstrap, topic, [f"a{i}".encode() for i in range(50)], partition=0)
    produce(spark_broker.bootstrap, topic, [f"b{i}".encode() for i in range(40)], partition=1)
    df = read(spark, spark_broker, subscribe=topic,
              startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
              endingOffsets=json.dumps({topic: {"0": 35, "1": -1}}),
              minPartitions="7")
    assert df.rdd.getNumPartitions() >= 7
    rows = df.select("partition", "offset", "value").collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, o) for o in range(10, 35)] + [(1, o) for o in range(40)]
    assert all(r.value == (f"a{r.offset}" if r.partition == 0 else f"b{r.offset}").encode()
               for r in rows)


def test_subscribe_pattern_reads_matching_topics_only(
        spark: Any, spark_broker: SparkBroker) -> None:
    prefix = unique_topic("pat")
    for name in (f"{prefix}-x", f"{prefix}-y", f"other-{prefix}"):
        create_topic(spark_broker.bootstrap, name, 1)
        produce(spark_broker.bootstrap, name, [name.encode()])
    df = read(spark, spark_broker, subscribePattern=f"{prefix}-.*")
    assert sorted(r.topic for r in df.select("topic").collect()) == [f"{prefix}-x",
                                                                     f"{prefix}-y"]


def test_bad_option_fails_naming_the_option(spark: Any, spark_broker: SparkBroker) -> None:
    with pytest.raises(Exception, match=r"(?i)unknown source option .maxOffsetPerTrigger"):
        read(spark, spark_broker, subscribe="t", maxOffsetPerTrigger="5").collect()
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, spark_broker, subscribe="t", startingOffsets="latest").collect()


def test_missing_topic_reads_no_rows_and_internal_events_topic_is_readable(
        spark: Any, spark_broker: SparkBroker) -> None:
    assert read(spark, spark_broker, subscribe=unique_topic("absent")).count() == 0
    # The broker's own __group_events topic reads like any other (the report's input).
    events = read(spark, spark_broker, subscribe="__group_events")
    assert events.select("topic").distinct().count() in (0, 1)
