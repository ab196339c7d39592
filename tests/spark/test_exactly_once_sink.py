"""The exactly-once sink (``transactionalIdPrefix``): a replayed or crashed micro-batch is
seen once by read_committed readers. The option and marker tests are pure; the rest run
Spark (the shared session, and one query in a process of its own that is killed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from groupwire.client import Consumer, TopicPartition
from groupwire.client.admin import Admin
from groupwire.client.types import OffsetAndMetadata
from groupwire.pipeline.options import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    OptionError,
    parse_sink_options,
)
from tests.spark.conftest import SparkBroker
from tests.spark.helpers import create_topic, produce, unique_topic

QUERY_TIMEOUT_S = 180
READ_TIMEOUT_S = 60

# --- options and markers (pure) ------------------------------------------------------------


def test_prefix_turns_transactions_on_and_the_timeout_needs_it() -> None:
    base = {"bootstrap": "h:1", "topic": "t"}
    plain = parse_sink_options(base)
    assert plain.transactional_id_prefix is None
    on = parse_sink_options({**base, "TRANSACTIONALIDPREFIX": " orders-copy ",
                             "transactiontimeoutms": "90000"})
    assert (on.transactional_id_prefix, on.transaction_timeout_ms) == ("orders-copy", 90000)
    assert parse_sink_options({**base, "transactionalIdPrefix": "p"}).transaction_timeout_ms \
        == DEFAULT_TRANSACTION_TIMEOUT_MS
    for options, named in [({**base, "transactionalIdPrefix": "  "}, "transactionalIdPrefix"),
                           ({**base, "transactionalIdPrefix": "x" * 201},
                            "transactionalIdPrefix"),
                           ({**base, "transactionTimeoutMs": "5000"}, "transactionTimeoutMs"),
                           ({**base, "transactionalIdPrefix": "p",
                             "transactionTimeoutMs": "0"}, "transactionTimeoutMs")]:
        with pytest.raises(OptionError, match=named):
            parse_sink_options(options)


def test_a_marker_counts_for_its_own_query_and_batch_or_later_only() -> None:
    writer = pytest.importorskip("groupwire.pipeline.writer")
    marker = writer.marker_metadata("query-a")
    tp, other = TopicPartition("out", 0), TopicPartition("elsewhere", 0)
    committed = {tp: OffsetAndMetadata(7, marker)}
    assert writer.committed_already(committed, "query-a", 7)  # the replay of batch 7
    assert writer.committed_already(committed, "query-a", 3)
    assert not writer.committed_already(committed, "query-a", 8)  # the next batch
    assert not writer.committed_already(committed, "query-b", 0)  # prefix reused
    # Offsets that are not this sink's markers say nothing, whatever their value.
    foreign = {tp: OffsetAndMetadata(99, ""),
               other: OffsetAndMetadata(99, json.dumps({"scope": "query-a"}))}
    assert not writer.committed_already(foreign, "query-a", 1)
    # A task that wrote to another topic before: its older marker stays beside the new.
    assert writer.committed_already({**foreign, other: OffsetAndMetadata(4, marker),
                                     tp: OffsetAndMetadata(2, marker)}, "query-a", 4)


# --- with Spark ----------------------------------------------------------------------------


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every record value of ``topic`` a consumer with ``isolation`` reads, up to the log
    end (every transaction is over by then: its stable offset is the log end)."""
    async def go() -> list[bytes]:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        async with Admin(bootstrap) as admin:
            ends = await admin.list_offsets(dict.fromkeys(tps, -1))
        out: list[bytes] = []
        async with Consumer(bootstrap, group_id=None, auto_offset_reset="earliest",
                            enable_auto_commit=False, isolation_level=isolation) as consumer:
            consumer.assign(tps)
            async with asyncio.timeout(READ_TIMEOUT_S):
                while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        out.extend(r.value or b"" for r in records)
        return out

    return asyncio.run(go())


def marker_offsets(bootstrap: str, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
    async def go() -> dict[TopicPartition, OffsetAndMetadata]:
        async with Admin(bootstrap) as admin:
            return await admin.list_consumer_group_offsets(group)

    return asyncio.run(go())


def copy_query(spark: Any, bootstrap: str, src: str, dst: str, prefix: str,
               checkpoint: Path) -> Any:
    """src -> dst through the exactly-once sink, 50 records a micro-batch, run to the end."""
    query = (spark.readStream.format("groupwire").option("bootstrap", bootstrap)
             .option("subscribe", src).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "50").load()
             .select("key", "value")
             .writeStream.format("groupwire").option("bootstrap", bootstrap)
             .option("topic", dst).option("transactionalIdPrefix", prefix)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the availableNow query did not finish"
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")
    return query


def batches_run(query: Any) -> dict[int, int]:
    """Batch id -> input rows, of the triggers that read something."""
    return {p["batchId"]: p["numInputRows"] for p in query.recentProgress
            if p["numInputRows"] > 0}


def test_batch_replayed_after_the_sinks_commit_writes_nothing_twice(
        spark: Any, spark_broker: SparkBroker, tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    src, dst = unique_topic("eos-src"), unique_topic("eos-dst")
    create_topic(bootstrap, src, 2)
    create_topic(bootstrap, dst, 2)
    values = [f"r{i}".encode() for i in range(200)]
    produce(bootstrap, src, values)
    prefix, checkpoint = unique_topic("eos-replay"), tmp_path / "cp"

    first = copy_query(spark, bootstrap, src, dst, prefix, checkpoint)
    ran = batches_run(first)
    assert len(ran) >= 4 and sum(ran.values()) == 200
    last = max(ran)
    # Each task's marker: the last batch it committed, under the query's id.
    for task in (0, 1):
        (marker,) = marker_offsets(bootstrap, f"{prefix}-{task}").values()
        assert marker.offset == last
        assert json.loads(marker.metadata)["scope"] == first.id
    # The fault: the sink committed batch `last`, Spark's commit log never said so.
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)

    again = copy_query(spark, bootstrap, src, dst, prefix, checkpoint)
    assert batches_run(again) == {last: ran[last]}  # Spark replayed that batch
    assert (checkpoint / "commits" / str(last)).exists()
    committed = read_values(bootstrap, dst, 2, "read_committed")
    assert sorted(committed) == sorted(values)
    # Not even an aborted copy: the replay found its markers and wrote nothing at all.
    assert sorted(read_values(bootstrap, dst, 2, "read_uncommitted")) == sorted(values)


def test_batch_write_commits_each_task_in_a_transaction(
        spark: Any, spark_broker: SparkBroker) -> None:
    bootstrap = spark_broker.bootstrap
    dst, prefix = unique_topic("eos-batch"), unique_topic("eos-batch-writer")
    create_topic(bootstrap, dst, 3)
    rows = [(f"k{i}", f"v{i}") for i in range(120)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(2)
    (df.write.format("groupwire").option("bootstrap", bootstrap).option("topic", dst)
     .option("transactionalIdPrefix", prefix).mode("append").save())
    got = read_values(bootstrap, dst, 3, "read_committed")
    assert sorted(got) == sorted(v.encode() for _, v in rows)
    scopes = set()
    for task in (0, 1):
        (marker,) = marker_offsets(bootstrap, f"{prefix}-{task}").values()
        scopes.add(json.loads(marker.metadata)["scope"])
        assert marker.offset == 0
    assert len(scopes) == 1 and scopes.pop().startswith("write-")  # one id for the write


CRASHING_QUERY = textwrap.dedent('''
    """The copy query, run until a task of batch CRASH_BATCH has stored its records in its
    transaction; then the worker SIGKILLs this whole Spark (driver, JVM, Python workers)."""
    import json, os, signal, sys

    import groupwire.pipeline  # sets PYSPARK_PYTHON before the session starts
    from pyspark.sql import SparkSession
    from groupwire.pipeline.source import GroupwireDataSource
    from groupwire.pipeline.writer import StreamWriter

    bootstrap, src, dst, prefix, checkpoint, crash_batch, crash_file = sys.argv[1:]
    driver_group = os.getpgid(0)


    class CrashingWriter(StreamWriter):
        def write(self, iterator):
            from pyspark import TaskContext
            ctx = TaskContext.get()
            if ctx.getLocalProperty("streaming.sql.batchId") == crash_batch:
                from groupwire.client.producer import Producer

                async def crash(producer):
                    await producer.flush()  # stored, in the open transaction
                    with open(crash_file, "w") as f:
                        json.dump({"task": ctx.partitionId(),
                                   "transactional_id": producer.transactional_id}, f)
                    os.killpg(driver_group, signal.SIGKILL)
                    os.killpg(0, signal.SIGKILL)  # the Python daemon's group: this worker

                Producer.commit_transaction = crash
            return super().write(iterator)


    class CrashingSource(GroupwireDataSource):
        def streamWriter(self, schema, overwrite):
            writer = super().streamWriter(schema, overwrite)
            return CrashingWriter(writer.opts, writer.columns)


    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(CrashingSource)
    query = (spark.readStream.format("groupwire").option("bootstrap", bootstrap)
             .option("subscribe", src).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "50").load()
             .select("key", "value")
             .writeStream.format("groupwire").option("bootstrap", bootstrap)
             .option("topic", dst).option("transactionalIdPrefix", prefix)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    sys.exit(3)  # not reached: the crash comes first
''')


@pytest.mark.slow
def test_query_killed_mid_transaction_restarts_from_its_checkpoint_exactly_once(
        spark: Any, spark_broker: SparkBroker, tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    src, dst = unique_topic("eos-kill-src"), unique_topic("eos-kill-dst")
    create_topic(bootstrap, src, 2)
    create_topic(bootstrap, dst, 2)
    values = [f"k{i}".encode() for i in range(200)]
    produce(bootstrap, src, values)
    prefix, checkpoint = unique_topic("eos-kill"), tmp_path / "cp"
    script, crash_file = tmp_path / "crashing_query.py", tmp_path / "crashed.json"
    script.write_text(CRASHING_QUERY)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.Popen(
        [sys.executable, str(script), bootstrap, src, dst, prefix, str(checkpoint), "2",
         str(crash_file)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=QUERY_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}: {err[-3000:]}"
    crashed = json.loads(crash_file.read_text())
    assert crashed["transactional_id"] == f"{prefix}-{crashed['task']}"
    # Batches 0 and 1 are in the commit log; 2 was planned, and died mid-write.
    commits = {p.name for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    assert commits == {"0", "1"}
    assert (checkpoint / "offsets" / "2").exists()
    stored = read_values(bootstrap, dst, 2, "read_uncommitted")

    again = copy_query(spark, bootstrap, src, dst, prefix, checkpoint)
    assert min(batches_run(again)) == 2  # the crashed batch, replayed first
    assert sorted(read_values(bootstrap, dst, 2, "read_committed")) == sorted(values)
    # The crashed transaction's records are in the log (read_uncommitted sees them,
    # and an at-least-once sink would have left them visible beside the replay's).
    assert len(stored) > 100
    assert len(read_values(bootstrap, dst, 2, "read_uncommitted")) > len(values)
