"""Structured Streaming: checkpointed offsets, restarts, new partitions, data loss."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.brokerproc import BrokerProcess
from tests.spark.conftest import BROKER_FLAGS, SparkBroker
from tests.spark.helpers import add_partitions, create_topic, produce, unique_topic

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

QUERY_TIMEOUT_S = 120


def run_available_now(spark: Any, bootstrap: str, topic: str, out: Path, checkpoint: Path,
                      **options: str) -> Any:
    """One availableNow run of topic -> Parquet; returns the finished query."""
    reader = (spark.readStream.format("groupwire").option("bootstrap", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (reader.load().writeStream.format("parquet")
             .option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    assert finished, "the availableNow query did not finish"
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")
    return query


def sink_rows(spark: Any, out: Path) -> list[tuple[int, int, bytes]]:
    rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    return sorted((r.partition, r.offset, bytes(r.value)) for r in rows)


def test_restarted_query_holds_each_record_exactly_once_across_new_partitions(
        spark: Any, spark_broker: SparkBroker, tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    topic = unique_topic("stream")
    create_topic(bootstrap, topic, 2)
    first = [f"first-{i}".encode() for i in range(120)]
    produce(bootstrap, topic, first)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    q1 = run_available_now(spark, bootstrap, topic, out, checkpoint,
                           maxOffsetsPerTrigger="50")
    assert len(sink_rows(spark, out)) == 120
    # The rate limit split the 120 records into several micro-batches.
    assert len([p for p in q1.recentProgress if p["numInputRows"] > 0]) >= 3
    offsets = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[-1])
    assert list(offsets[topic]) == sorted(offsets[topic])  # stable sorted keys

    # More records, and a partition added while the query is stopped.
    add_partitions(bootstrap, topic, 3)
    second = [f"second-{i}".encode() for i in range(90)]
    produce(bootstrap, topic, second)
    produce(bootstrap, topic, [b"only-new-partition"], partition=2)
    run_available_now(spark, bootstrap, topic, out, checkpoint)

    rows = sink_rows(spark, out)
    values = [v for _, _, v in rows]
    assert sorted(values) == sorted([*first, *second, b"only-new-partition"])
    assert len({(p, o) for p, o, _ in rows}) == len(rows)  # no record twice
    assert any(p == 2 for p, _, _ in rows)
    # Nothing new: a third run reads nothing and adds nothing.
    run_available_now(spark, bootstrap, topic, out, checkpoint)
    assert len(sink_rows(spark, out)) == len(rows)


def test_partition_added_mid_stream_is_picked_up(
        spark: Any, spark_broker: SparkBroker, tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    topic = unique_topic("grow")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [b"before"])
    seen: list[tuple[int, bytes]] = []

    def collect(df: Any, _batch_id: int) -> None:
        seen.extend((r.partition, bytes(r.value)) for r in df.collect())

    query = (spark.readStream.format("groupwire").option("bootstrap", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        assert _wait_for(query, lambda: (0, b"before") in seen)
        add_partitions(bootstrap, topic, 2)
        produce(bootstrap, topic, [b"after"], partition=1)
        assert _wait_for(query, lambda: (1, b"after") in seen)
    finally:
        query.stop()
    assert sorted(seen) == [(0, b"before"), (1, b"after")]


def _wait_for(query: Any, condition: Any) -> bool:
    """Wait on the query's own progress events (each finished trigger), not on a clock."""
    for _ in range(200):
        if condition():
            return True
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        query.processAllAvailable()
    return condition()


@pytest.fixture
def retention_broker(tmp_path: Path) -> Any:
    """A broker that keeps ~one small segment per partition (retention by size)."""
    proc = BrokerProcess(tmp_path / "retention-data", *BROKER_FLAGS,
                         "--segment-bytes", "1024", "--log-retention-bytes", "1024",
                         "--log-retention-check-interval-ms", "50").start()
    try:
        yield SparkBroker(proc=proc, port=proc.port, data_dir=tmp_path / "retention-data")
    finally:
        proc.kill()


def test_records_deleted_before_read_fail_or_are_skipped(
        spark: Any, retention_broker: SparkBroker, tmp_path: Path) -> None:
    bootstrap = retention_broker.bootstrap
    topic = unique_topic("loss")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [b"x" * 200 for _ in range(5)])
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    run_available_now(spark, bootstrap, topic, out, checkpoint)
    first_count = len(sink_rows(spark, out))
    assert first_count == 5
    # Many more records while the query is stopped: retention deletes the oldest of them.
    for _ in range(10):
        produce(bootstrap, topic, [b"y" * 200 for _ in range(10)])
    assert _wait_log_start_past(bootstrap, topic, 5), "retention deleted nothing"

    # The error names the topic, partition and first lost offset, and the way out.
    with pytest.raises(Exception, match=rf"(?s){topic}\[0\] offsets 5-.*failOnDataLoss"):
        run_available_now(spark, bootstrap, topic, out, checkpoint)

    run_available_now(spark, bootstrap, topic, out, checkpoint, failOnDataLoss="false")
    rows = sink_rows(spark, out)
    start = _log_start(bootstrap, topic)
    offsets = [o for _, o, _ in rows]
    assert offsets[:5] == list(range(5))
    assert offsets[5:] == list(range(offsets[5], 105)) and offsets[5] >= 5
    assert offsets[5] <= start or start == 105


def _wait_log_start_past(bootstrap: str, topic: str, offset: int) -> bool:
    """Retention runs on the broker's own timer in another process: poll its answer."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if _log_start(bootstrap, topic) > offset:
            return True
        time.sleep(0.05)
    return False


def _log_start(bootstrap: str, topic: str) -> int:
    import asyncio

    from groupwire.client import TopicPartition
    from groupwire.client.admin import Admin

    async def go() -> int:
        async with Admin(bootstrap) as admin:
            got = await admin.list_offsets({TopicPartition(topic, 0): -2})
        return got[TopicPartition(topic, 0)]

    return asyncio.run(go())
