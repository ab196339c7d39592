"""Writing through the data source: rows come back through a plain Consumer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import SparkBroker
from tests.spark.helpers import consume_all, create_topic, produce, unique_topic

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")


def test_rows_written_are_read_back_by_a_consumer(spark: Any,
                                                  spark_broker: SparkBroker) -> None:
    topic = unique_topic("write")
    create_topic(spark_broker.bootstrap, topic, 3)
    rows = [(f"k{i}".encode(), f"v{i}".encode(), i % 3,
             [{"key": "n", "value": str(i).encode()}] if i % 2 else [])
            for i in range(200)]
    df = spark.createDataFrame(
        rows, "key binary, value binary, partition int, "
              "headers array<struct<key: string, value: binary>>").repartition(2)
    (df.write.format("groupwire").option("bootstrap", spark_broker.bootstrap)
     .option("topic", topic).mode("append").save())

    got = consume_all(spark_broker.bootstrap, topic, 3)
    assert len(got) == 200
    by_value = {value: (part, key, headers) for part, _off, key, value, headers in got}
    for i, (key, value, part, headers) in enumerate(rows):
        assert by_value[value] == (part, key, [(h["key"], h["value"]) for h in headers]), i


def test_string_columns_and_topic_column_route_rows(spark: Any,
                                                    spark_broker: SparkBroker) -> None:
    a, b = unique_topic("route-a"), unique_topic("route-b")
    for name in (a, b):
        create_topic(spark_broker.bootstrap, name, 1)
    df = spark.createDataFrame([(a, "one", None), (b, "two", "k"), (a, None, "tomb")],
                               "topic string, value string, key string")
    df.write.format("groupwire").option("bootstrap", spark_broker.bootstrap).save(
        mode="append")
    # Rows of one topic may come from different write tasks: compare without order.
    got_a = [(k, v) for _, _, k, v, _ in consume_all(spark_broker.bootstrap, a, 1)]
    assert sorted(got_a, key=repr) == sorted([(None, b"one"), (b"tomb", None)], key=repr)
    assert [(k, v) for _, _, k, v, _ in consume_all(spark_broker.bootstrap, b, 1)] == [
        (b"k", b"two")]


def test_write_without_topic_fails_naming_it(spark: Any, spark_broker: SparkBroker) -> None:
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="no topic"):
        df.write.format("groupwire").option("bootstrap", spark_broker.bootstrap).save(
            mode="append")


def test_stream_copy_between_topics_through_source_and_sink(
        spark: Any, spark_broker: SparkBroker, tmp_path: Path) -> None:
    src, dst = unique_topic("copy-src"), unique_topic("copy-dst")
    create_topic(spark_broker.bootstrap, src, 2)
    create_topic(spark_broker.bootstrap, dst, 2)
    values = [f"m{i}".encode() for i in range(150)]
    produce(spark_broker.bootstrap, src, values)
    query = (spark.readStream.format("groupwire").option("bootstrap", spark_broker.bootstrap)
             .option("subscribe", src).option("startingOffsets", "earliest").load()
             .select("key", "value", "partition", "headers")
             .writeStream.format("groupwire").option("bootstrap", spark_broker.bootstrap)
             .option("topic", dst).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    got = consume_all(spark_broker.bootstrap, dst, 2)
    assert sorted(v or b"" for _, _, _, v, _ in got) == sorted(values)
    # Keys and source partitions are kept.
    assert all(k == v for _, _, k, v, _ in got)
