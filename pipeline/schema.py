"""The rows the source produces: Spark's Kafka source schema, in Spark and Arrow terms.

Spark checks every Arrow batch a reader yields against the Arrow form of the declared
schema (pyspark's ``to_arrow_schema``, timestamps in microseconds, UTC, list items named
``element``), so :func:`arrow_schema` builds exactly that and nothing is cast later.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

COLUMNS: Final = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")

SCHEMA_DDL: Final = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, headers array<struct<key: string, value: binary>>"
)
"""What ``spark.read.format("groupwire").load()`` returns: the bytes as produced in
``key``/``value`` (never decoded), the producer's create time in ``timestamp``."""

WRITE_COLUMNS: Final = frozenset({"key", "value", "topic", "partition", "headers"})
"""Columns the writer reads; ``value`` is required, the others optional."""


def headers_type() -> pa.DataType:
    return pa.list_(pa.field("element", pa.struct([("key", pa.string()),
                                                   ("value", pa.binary())])))


def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` for :data:`SCHEMA_DDL`."""
    return pa.schema([
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", headers_type()),
    ])
