"""Benchmark 6: records/s through the `groupwire` Spark data source vs the plain Consumer.

One topic of 100-byte records (``--partitions``, default 4) is produced once; each round
then reads all of it twice: with a plain :class:`client.Consumer` (assigned partitions, no
group, on this process's loop) and with ``spark.read.format("groupwire")`` on a
``local[2]`` session, every column materialised into Spark's ``noop`` sink. The ratio
(data source ÷ consumer) is taken per round, so a noisy machine moves both sides together.
The Spark session and its Python workers are started and warmed up before any round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Coroutine
from typing import Any

from bench.common import BenchError, BrokerProc, Figure, bench_main, machine, with_goal
from groupwire.pipeline.reading import loop_factory

RECORD_BYTES = 100
VALUE = bytes(range(RECORD_BYTES))
GOAL = ">= 0.7"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=1_000_000, help="records in the topic")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")


async def produce(address: str, topic: str, records: int, partitions: int) -> None:
    from groupwire.client import Admin, Producer

    async with Admin(address) as admin:
        await admin.create_topics(topic, num_partitions=partitions)
    async with Producer(address, linger_ms=20) as producer:
        for i in range(records):
            await producer.send(topic, VALUE, partition=i % partitions)
        await producer.flush()


async def consume(address: str, topic: str, records: int, partitions: int) -> float:
    """Seconds for a plain Consumer to read every record of the topic."""
    from groupwire.client import Consumer, TopicPartition

    async with Consumer(address, group_id=None, auto_offset_reset="earliest",
                        enable_auto_commit=False, max_poll_records=5000) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        t0 = time.monotonic()
        seen = 0
        while seen < records:
            batch = await consumer.getmany(timeout_ms=1000)
            if not batch:
                raise BenchError(f"the consumer stalled after {seen} of {records} records")
            seen += sum(len(v) for v in batch.values())
        return time.monotonic() - t0


def run_loop(coro: Coroutine[Any, Any, float]) -> float:
    """uvloop when installed, as the CLI and the data source's read tasks run."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coro)


def spark_session(master: str) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise BenchError("pyspark is not installed (pip install -e '.[spark]')") from exc

    from groupwire import pipeline

    spark = (SparkSession.builder.master(master).appName("groupwire-bench")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    return spark


def spark_read(spark: Any, address: str, topic: str, records: int) -> float:
    """Seconds for the data source to read every record into Spark (noop sink)."""
    df = (spark.read.format("groupwire").option("bootstrap", address)
          .option("subscribe", topic).load())
    t0 = time.monotonic()
    df.write.format("noop").mode("overwrite").save()
    seconds = time.monotonic() - t0
    count = df.count()
    if count != records:
        raise BenchError(f"the data source read {count} records, expected {records}")
    return seconds


def run(args: argparse.Namespace) -> list[Figure]:
    records, rounds, warmup = args.records, args.rounds, args.warmup
    if args.smoke:
        records, rounds, warmup = min(records, 20_000), 1, 0
    settings = {"records": records, "record_bytes": RECORD_BYTES,
                "partitions": args.partitions, "master": args.master,
                "spark_sink": "noop (all columns materialised)",
                "consumer": "assigned, no group, max_poll_records=5000",
                "machine": machine()}
    spark = spark_session(args.master)
    source_rates: list[float] = []
    consumer_rates: list[float] = []
    ratios: list[float] = []
    try:
        with BrokerProc(extra=("--fsync", "never")) as broker:
            topic = f"spark-bench-{time.time_ns()}"
            asyncio.run(produce(broker.address, topic, records, args.partitions))
            # Warm-up: the JVM's code paths and Spark's Python workers.
            spark_read(spark, broker.address, topic, records)
            for i in range(warmup + rounds):
                plain = run_loop(consume(broker.address, topic, records, args.partitions))
                through_spark = spark_read(spark, broker.address, topic, records)
                if i < warmup:
                    continue
                consumer_rates.append(records / plain)
                source_rates.append(records / through_spark)
                ratios.append(plain / through_spark)
                print(f"round {i - warmup + 1}: consumer {records / plain:,.0f} rec/s, "
                      f"data source {records / through_spark:,.0f} rec/s, "
                      f"ratio {plain / through_spark:.2f}", file=sys.stderr)
    finally:
        spark.stop()
    return [
        Figure("data source read", "records/s", source_rates, settings),
        Figure("plain consumer read", "records/s", consumer_rates, settings),
        with_goal(Figure("data source / consumer", "ratio", ratios, settings), GOAL),
    ]


main = bench_main("spark_source", add_arguments, run, default_rounds=3, default_warmup=1,
                  description=__doc__)

if __name__ == "__main__":
    sys.exit(main(None))
