"""The report's tables as Spark transformations of ``__group_events`` records.

Input is any DataFrame with Spark's Kafka schema (``key``, ``value``, ``offset``,
``timestamp``...), so the same code runs on the ``groupwire`` data source and on records
built by hand in tests. Decoding and the per-group ownership walk run in Python workers
through Arrow (``mapInArrow``, ``applyInArrow``) calling the pure modules; everything else
is Spark SQL, so nothing is collected on the driver but the final small summaries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from groupwire.pipeline.report.events import (
    COMMIT_FENCED,
    CONNECTION_LOST,
    KNOWN_TYPES,
    MEMBER_JOINED,
    REBALANCE_COMPLETED,
    REBALANCE_STARTED,
    REMOVAL_TYPES,
    decode_or_mark,
    event_from_record,
)
from groupwire.pipeline.report.ownership import UNOWNED, ownership_intervals

PARTITIONS_TYPE = ArrayType(StructType([
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
]), False)

EVENT_SCHEMA = StructType([
    StructField("offset", LongType(), False),
    StructField("ts_ms", LongType(), False),
    StructField("event_time", TimestampType(), False),
    StructField("type", StringType(), False),
    StructField("group_id", StringType(), False),
    StructField("generation_id", IntegerType(), False),
    StructField("member_id", StringType(), True),
    StructField("group_instance_id", StringType(), True),
    StructField("reason", StringType(), True),
    StructField("detail", StringType(), True),
    StructField("duration_ms", LongType(), True),
    StructField("partitions", PARTITIONS_TYPE, False),
    StructField("replaced_member_id", StringType(), True),
])

INTERVAL_SCHEMA = StructType([
    StructField("group_id", StringType(), False),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("state", StringType(), False),
    StructField("start_ms", LongType(), False),
    StructField("end_ms", LongType(), True),
    StructField("duration_ms", LongType(), False),
    StructField("open", BooleanType(), False),
    StructField("owner_member_id", StringType(), True),
    StructField("generation_id", IntegerType(), True),
    StructField("start_reason", StringType(), True),
    StructField("end_reason", StringType(), True),
])

_ARROW_PARTITIONS = pa.list_(pa.field("element", pa.struct([
    pa.field("topic", pa.string(), False), pa.field("partition", pa.int32(), False)]),
    False))
ARROW_EVENT_SCHEMA = pa.schema([
    pa.field("offset", pa.int64(), False),
    pa.field("ts_ms", pa.int64(), False),
    pa.field("event_time", pa.timestamp("us", tz="UTC"), False),
    pa.field("type", pa.string(), False),
    pa.field("group_id", pa.string(), False),
    pa.field("generation_id", pa.int32(), False),
    pa.field("member_id", pa.string()),
    pa.field("group_instance_id", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("detail", pa.string()),
    pa.field("duration_ms", pa.int64()),
    pa.field("partitions", _ARROW_PARTITIONS, False),
    pa.field("replaced_member_id", pa.string()),
])
ARROW_INTERVAL_SCHEMA = pa.schema([
    pa.field("group_id", pa.string(), False),
    pa.field("topic", pa.string(), False),
    pa.field("partition", pa.int32(), False),
    pa.field("state", pa.string(), False),
    pa.field("start_ms", pa.int64(), False),
    pa.field("end_ms", pa.int64()),
    pa.field("duration_ms", pa.int64(), False),
    pa.field("open", pa.bool_(), False),
    pa.field("owner_member_id", pa.string()),
    pa.field("generation_id", pa.int32()),
    pa.field("start_reason", pa.string()),
    pa.field("end_reason", pa.string()),
])


# --- decoding ---------------------------------------------------------------------------


def _decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    for batch in batches:
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        offsets = batch.column("offset").to_pylist()
        micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
        rows = [decode_or_mark(v, o, (t or 0) // 1000, k).as_record()
                for k, v, o, t in zip(keys, values, offsets, micros, strict=True)]
        yield pa.RecordBatch.from_pylist(rows, schema=ARROW_EVENT_SCHEMA)


def decode_events(records: DataFrame) -> DataFrame:
    """Kafka-schema records of ``__group_events`` to ``EVENT_SCHEMA`` rows.

    Undecodable values become rows of type ``undecodable`` (see ``events.decode_or_mark``).
    """
    return (records.select("key", "value", "offset", "timestamp")
            .mapInArrow(_decode_batches, EVENT_SCHEMA))


def select_events(events: DataFrame, group: str | None = None,
                  since_ms: int | None = None) -> DataFrame:
    """The known events of one group (or all), from ``since_ms`` on."""
    out = events.filter(F.col("type").isin(*sorted(KNOWN_TYPES)))
    if group is not None:
        out = out.filter(F.col("group_id") == group)
    if since_ms is not None:
        out = out.filter(F.col("ts_ms") >= since_ms)
    return out


# --- rebalances -------------------------------------------------------------------------


def _millis_to_ts(col: Column) -> Column:
    return F.timestamp_millis(col)


def rebalances(events: DataFrame) -> DataFrame:
    """One row per rebalance: reason, trigger, start, end, duration, partitions moved.

    A completed rebalance is its ``rebalance_completed`` event (which repeats the reason
    and carries the duration); one still running at the end of the data is a
    ``rebalance_started`` not followed by a completion in its group, with null end.
    """
    rb = events.filter(F.col("type").isin(REBALANCE_STARTED, REBALANCE_COMPLETED))
    by_group = Window.partitionBy("group_id").orderBy("offset")
    rb = rb.withColumn("_next", F.lead("type").over(by_group))
    done = rb.filter(F.col("type") == REBALANCE_COMPLETED).select(
        "group_id",
        F.col("generation_id").cast(IntegerType()).alias("generation_id"),
        "reason", "detail",
        F.col("member_id").alias("trigger_member_id"),
        (F.col("ts_ms") - F.coalesce(F.col("duration_ms"), F.lit(0))).alias("started_ms"),
        F.col("ts_ms").alias("completed_ms"),
        F.col("duration_ms"),
        F.size("partitions").alias("partitions_moved"),
        F.col("partitions").alias("moved_partitions"),
        F.lit(True).alias("completed"),
    )
    running = rb.filter((F.col("type") == REBALANCE_STARTED)
                        & (F.col("_next").isNull() | (F.col("_next") != REBALANCE_COMPLETED))
                        ).select(
        "group_id",
        F.lit(None).cast(IntegerType()).alias("generation_id"),
        "reason", "detail",
        F.col("member_id").alias("trigger_member_id"),
        F.col("ts_ms").alias("started_ms"),
        F.lit(None).cast(LongType()).alias("completed_ms"),
        F.lit(None).cast(LongType()).alias("duration_ms"),
        F.lit(0).alias("partitions_moved"),
        F.array().cast(PARTITIONS_TYPE).alias("moved_partitions"),
        F.lit(False).alias("completed"),
    )
    out = done.unionByName(running)
    return (out.withColumn("started_at", _millis_to_ts(F.col("started_ms")))
            .withColumn("completed_at", _millis_to_ts(F.col("completed_ms")))
            .orderBy("started_ms", "group_id"))


# --- member sessions --------------------------------------------------------------------


def member_sessions(events: DataFrame) -> DataFrame:
    """One row per member id: when it joined, lost its connection, how it ended.

    A static member replaced by a new member id (``member_joined`` with a
    ``replaced_member_id``) ends with ``end_type`` ``replaced``. ``ended_ms`` null: still a
    member at the end of the data.
    """
    replaced = (events.filter((F.col("type") == MEMBER_JOINED)
                              & F.col("replaced_member_id").isNotNull())
                .select("group_id", "ts_ms", "generation_id", "group_instance_id",
                        F.col("replaced_member_id").alias("member_id"),
                        F.lit("replaced").alias("type"),
                        F.lit("static-member-replaced").alias("reason"),
                        F.array().cast(PARTITIONS_TYPE).alias("partitions")))
    own = events.filter(F.col("member_id").isNotNull() & F.col("type").isin(
        MEMBER_JOINED, CONNECTION_LOST, COMMIT_FENCED, *sorted(REMOVAL_TYPES))).select(
        "group_id", "ts_ms", "generation_id", "group_instance_id", "member_id", "type",
        "reason", "partitions")
    rows = own.unionByName(replaced)
    is_end = F.col("type").isin("replaced", *sorted(REMOVAL_TYPES))
    end = F.min(F.when(is_end, F.struct("ts_ms", "type", "reason", "partitions")))
    join = F.min(F.when(F.col("type") == MEMBER_JOINED,
                        F.struct("ts_ms", "generation_id", "reason")))
    out = rows.groupBy("group_id", "member_id").agg(
        F.first("group_instance_id", ignorenulls=True).alias("group_instance_id"),
        join.alias("_join"),
        F.min(F.when(F.col("type") == CONNECTION_LOST, F.col("ts_ms"))).alias(
            "connection_lost_ms"),
        end.alias("_end"),
        F.count(F.when(F.col("type") == COMMIT_FENCED, 1)).alias("commits_fenced"),
    )
    return (out.select(
        "group_id", "member_id", "group_instance_id",
        F.col("_join.ts_ms").alias("joined_ms"),
        F.col("_join.generation_id").alias("joined_generation"),
        F.col("_join.reason").alias("join_reason"),
        "connection_lost_ms",
        F.col("_end.ts_ms").alias("ended_ms"),
        F.col("_end.type").alias("end_type"),
        F.col("_end.reason").alias("end_reason"),
        F.coalesce(F.size("_end.partitions"), F.lit(0)).alias("partitions_at_end"),
        "commits_fenced",
    ).withColumn("session_ms", F.col("ended_ms") - F.col("joined_ms"))
     .orderBy(F.col("joined_ms").asc_nulls_first(), "member_id"))


# --- partition ownership ----------------------------------------------------------------


def ownership(events: DataFrame, as_of_ms: int) -> DataFrame:
    """Owned and ownerless intervals per partition (see ``ownership.py`` for the rules).

    Open intervals count up to ``as_of_ms``, the end of the data the report covers.
    """

    def per_group(table: Any) -> Any:
        rows = [event_from_record(r) for r in table.to_pylist()]
        intervals = ownership_intervals(rows)
        return pa.Table.from_pylist([iv.as_record(as_of_ms) for iv in intervals],
                                    schema=ARROW_INTERVAL_SCHEMA)

    return (events.groupBy("group_id").applyInArrow(per_group, INTERVAL_SCHEMA)
            .orderBy("group_id", "topic", "partition", "start_ms"))


def partition_downtime(intervals: DataFrame) -> DataFrame:
    """Per partition: total and longest time without owner, number of gaps."""
    gap = F.col("state") == UNOWNED
    return (intervals.groupBy("group_id", "topic", "partition").agg(
        F.sum(F.when(gap, F.col("duration_ms")).otherwise(0)).alias("unowned_ms"),
        F.count(F.when(gap, 1)).alias("gaps"),
        F.coalesce(F.max(F.when(gap, F.col("duration_ms"))), F.lit(0)).alias("longest_ms"),
        F.max(gap & F.col("open")).alias("still_unowned"),
    ).orderBy("group_id", "topic", "partition"))
