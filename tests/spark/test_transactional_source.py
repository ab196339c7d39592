"""The source over transactional topics: markers are never rows, read_committed drops
aborted transactions and stops at the last stable offset (batch reads and streams).

Topics are written with the SDK's transactional Producer; the broker writes the markers
after EndTxn is answered, so each test first waits for the log to settle (its end and
last stable offset)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from groupwire.client import Producer
from groupwire.client.cluster import Cluster
from groupwire.pipeline.offsets import OffsetRange
from groupwire.pipeline.options import OptionError, parse_source_options
from groupwire.protocol.messages import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from tests.spark.conftest import SparkBroker
from tests.spark.helpers import create_topic, unique_topic

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")

QUERY_TIMEOUT_S = 120
SETTLE_TIMEOUT_S = 30

Written = dict[int, bytes]
"""offset -> value of each record written (key = value)"""


# --- the option (pure) ----------------------------------------------------------------------


def test_isolation_level_defaults_to_read_uncommitted_and_takes_kafkas_name_too() -> None:
    base = {"bootstrap": "h:1", "subscribe": "t"}
    assert parse_source_options(base, "batch").isolation_level == "read_uncommitted"
    for name in ("isolationLevel", "ISOLATIONLEVEL", "isolation.level",
                 "kafka.isolation.level"):
        opts = parse_source_options({**base, name: " READ_COMMITTED "}, "stream")
        assert opts.isolation_level == "read_committed", name
    with pytest.raises(OptionError, match=r"'isolationLevel'.*read_uncommitted or "
                                          r"read_committed.*'committed'"):
        parse_source_options({**base, "isolationLevel": "committed"}, "batch")
    with pytest.raises(OptionError, match="given twice"):
        parse_source_options({**base, "isolationLevel": "read_committed",
                              "kafka.isolation.level": "read_committed"}, "batch")


# --- writing and waiting ----------------------------------------------------------------------


def _bounds(bootstrap: str, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0, from a read_committed Fetch
    (sent here, not through the planner under test)."""
    async def go() -> tuple[int, int]:
        cluster = Cluster(bootstrap)
        try:
            resp = await cluster.send(FetchRequest(
                max_wait_ms=0, isolation_level=1, topics=[FetchTopic(
                    topic=topic, partitions=[FetchPartition(partition=0, fetch_offset=0,
                                                        partition_max_bytes=1)])]),
                response_type=FetchResponse)
        finally:
            await cluster.close()
        part = resp.responses[0].partitions[0]
        return part.last_stable_offset, part.high_watermark

    return asyncio.run(go())


def _settle(bootstrap: str, topic: str, done: Callable[[int, int], bool]) -> tuple[int, int]:
    """Wait until the markers the broker writes after EndTxn are in: ``done(lso, hw)``."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        lso, hw = _bounds(bootstrap, topic)
        if done(lso, hw):
            return lso, hw
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: log did not settle (lso {lso}, hw {hw})")
        time.sleep(0.05)


async def _send(producer: Producer, topic: str, values: list[bytes], into: Written) -> None:
    for v in values:  # one at a time: offsets in the order given, each its own batch
        meta = await producer.send_and_wait(topic, v, key=v, partition=0)
        into[meta.offset] = v


def write_mixed_topic(bootstrap: str, topic: str) -> tuple[Written, Written, int]:
    """Plain records, a committed transaction, an aborted one interleaved with another
    producer's committed one, and a committed one last: the log ends on a marker.
    Returns (every record written, the aborted ones, the log end)."""
    written: Written = {}
    aborted: Written = {}

    async def go() -> None:
        async with (Producer(bootstrap, linger_ms=0) as plain,
                    Producer(bootstrap, transactional_id=f"{topic}-a") as a,
                    Producer(bootstrap, transactional_id=f"{topic}-b") as b):
            await _send(plain, topic, [b"plain-0", b"plain-1"], written)
            async with a.transaction():
                await _send(a, topic, [b"committed-0", b"committed-1"], written)
            await a.begin_transaction()
            await b.begin_transaction()
            await _send(a, topic, [b"aborted-0"], aborted)
            await _send(b, topic, [b"kept-0"], written)
            await _send(a, topic, [b"aborted-1"], aborted)
            await _send(plain, topic, [b"plain-2"], written)  # inside A's aborted span
            await a.abort_transaction()
            await _send(b, topic, [b"kept-1"], written)
            await b.commit_transaction()
            async with a.transaction():
                await _send(a, topic, [b"last-0"], written)

    asyncio.run(go())
    markers = 4  # commit A, abort A, commit B, commit A
    end = len(written) + len(aborted) + markers
    _settle(bootstrap, topic, lambda lso, hw: lso == hw == end)
    return {**written, **aborted}, aborted, end


# --- batch reads ------------------------------------------------------------------------------


def read_rows(spark: Any, bootstrap: str, topic: str, **options: str,
              ) -> list[tuple[int, bytes, bytes]]:
    reader = (spark.read.format("groupwire").option("bootstrap", bootstrap)
              .option("subscribe", topic))
    for k, v in options.items():
        reader = reader.option(k, v)
    rows = reader.load().select("offset", "key", "value").collect()
    return sorted((r.offset, bytes(r.key), bytes(r.value)) for r in rows)


def test_batch_reads_show_no_markers_and_read_committed_no_aborted_records(
        spark: Any, spark_broker: SparkBroker) -> None:
    bootstrap = spark_broker.bootstrap
    topic = unique_topic("txn-batch")
    create_topic(bootstrap, topic, 1)
    everything, aborted, end = write_mixed_topic(bootstrap, topic)
    markers = sorted(set(range(end)) - set(everything))
    assert len(markers) == 4 and markers[-1] == end - 1  # the log ends on a marker

    uncommitted = read_rows(spark, bootstrap, topic)
    assert uncommitted == [(o, v, v) for o, v in sorted(everything.items())]

    committed = [(o, v, v) for o, v in sorted(everything.items()) if o not in aborted]
    assert read_rows(spark, bootstrap, topic, isolationLevel="read_committed") == committed
    # One Spark partition per offset: ranges that are a marker alone complete with no
    # row, ranges that start inside the aborted transaction still drop its records.
    assert read_rows(spark, bootstrap, topic, isolationLevel="read_committed",
                     minPartitions=str(end)) == committed
    assert [v for _, _, v in committed] == [
        b"plain-0", b"plain-1", b"committed-0", b"committed-1", b"kept-0", b"plain-2",
        b"kept-1", b"last-0"]


def test_a_range_past_the_last_stable_offset_waits_then_names_the_open_transaction(
        spark_broker: SparkBroker) -> None:
    from groupwire.pipeline.reading import ReadError, ReadTask, read_range

    bootstrap = spark_broker.bootstrap
    topic = unique_topic("txn-held")
    create_topic(bootstrap, topic, 1)
    written: Written = {}

    async def go() -> None:
        async with Producer(bootstrap) as plain:
            await _send(plain, topic, [b"plain"], written)
        async with Producer(bootstrap, transactional_id=f"{topic}-open",
                            transaction_timeout_ms=120000) as txn:
            await txn.begin_transaction()
            await _send(txn, topic, [b"open"], written)
            task = ReadTask(bootstrap=bootstrap, range=OffsetRange(topic, 0, 0, 2),
                            fail_on_data_loss=True, fetch_max_bytes=1 << 20,
                            request_timeout_ms=600, isolation_level="read_committed")
            started = time.monotonic()
            with pytest.raises(ReadError, match=r"offsets 1-1 are past the last stable "
                                                r"offset 1: a transaction open"):
                await asyncio.to_thread(lambda: [b for b in read_range(task)])
            assert time.monotonic() - started >= 0.6  # it waited for the transaction
            await txn.abort_transaction()

    asyncio.run(go())


# --- streams ----------------------------------------------------------------------------------


def run_available_now(spark: Any, bootstrap: str, topic: str, out: Path,
                      checkpoint: Path) -> dict[str, Any]:
    """One availableNow read_committed run of topic -> Parquet; the offsets it ended at."""
    query = (spark.readStream.format("groupwire").option("bootstrap", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("isolationLevel", "read_committed").load()
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the availableNow query did not finish"
    assert query.exception() is None, f"query failed: {query.exception()}"
    batches = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir()
                     if p.name.isdigit())
    last = (checkpoint / "offsets" / str(batches[-1])).read_text().splitlines()[-1]
    return dict(json.loads(last))


def sink_rows(spark: Any, out: Path) -> list[tuple[int, bytes]]:
    rows = spark.read.parquet(str(out)).select("offset", "value").collect()
    return sorted((r.offset, bytes(r.value)) for r in rows)


def test_read_committed_stream_stops_at_an_open_transaction_and_reads_on_after_commit(
        spark: Any, spark_broker: SparkBroker, tmp_path: Path) -> None:
    bootstrap = spark_broker.bootstrap
    topic = unique_topic("txn-stream")
    create_topic(bootstrap, topic, 1)
    written: Written = {}
    runner = asyncio.Runner()  # the open transaction's producer lives across both runs
    txn = Producer(bootstrap, transactional_id=f"{topic}-t", transaction_timeout_ms=120000)
    plain = Producer(bootstrap, linger_ms=0)
    try:
        async def before() -> int:
            await txn.start()
            await plain.start()
            await _send(plain, topic, [b"plain-0"], written)
            async with txn.transaction():
                await _send(txn, topic, [b"committed-0"], written)
            await txn.begin_transaction()
            opened: Written = {}
            await _send(txn, topic, [b"open-0"], opened)
            await _send(plain, topic, [b"plain-after-open"], written)
            await _send(txn, topic, [b"open-1"], opened)
            written.update(opened)
            return min(opened)

        first_open = runner.run(before())
        # plain-0, committed-0, its marker, then the open transaction's first record
        assert first_open == 3
        _settle(bootstrap, topic, lambda lso, hw: lso == first_open and hw == 6)
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

        offsets = run_available_now(spark, bootstrap, topic, out, checkpoint)
        assert offsets == {topic: {"0": first_open}}
        assert sink_rows(spark, out) == [(0, b"plain-0"), (1, b"committed-0")]

        runner.run(txn.commit_transaction())
        _settle(bootstrap, topic, lambda lso, hw: lso == hw == 7)
        offsets = run_available_now(spark, bootstrap, topic, out, checkpoint)
        assert offsets == {topic: {"0": 7}}  # past the commit marker: nothing left
        assert sink_rows(spark, out) == sorted(written.items())
        assert [v for _, v in sink_rows(spark, out)][2:] == [
            b"open-0", b"plain-after-open", b"open-1"]
    finally:
        runner.run(txn.close())
        runner.run(plain.close())
        runner.close()
