"""The ``groupwire`` PySpark data source, its batch reader, and :func:`register`.

Spark plans on the driver side and runs ``read()`` on a pickled copy of the reader in
worker processes, so each partition carries a complete
:class:`~groupwire.pipeline.reading.ReadTask` (address, range, settings): nothing read()
needs lives on the reader object. Streaming reads are in :mod:`groupwire.pipeline.stream`,
writes in :mod:`groupwire.pipeline.writer`.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from groupwire.pipeline.offsets import OffsetRange, resolve_spec
from groupwire.pipeline.options import (
    OptionError,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
)
from groupwire.pipeline.partitions import read_partition, tasks_for
from groupwire.pipeline.planning import Planner
from groupwire.pipeline.schema import COLUMNS, SCHEMA_DDL, WRITE_COLUMNS
from groupwire.pipeline.stream import StreamReader
from groupwire.pipeline.writer import BatchWriter, StreamWriter


def register(spark: SparkSession) -> None:
    """Make ``format("groupwire")`` available on ``spark`` (reads, streams and writes)."""
    worker_python = getattr(spark.sparkContext, "pythonExec", None)
    if (worker_python not in (None, sys.executable)
            and (spark.sparkContext.master or "").startswith("local")):
        warnings.warn(
            f"Spark's Python workers run {worker_python!r}, not {sys.executable!r}: unless "
            "groupwire is installed there too, reads fail with \"No module named "
            "'groupwire'\". Import groupwire.pipeline (or set PYSPARK_PYTHON) before "
            "creating the session.", RuntimeWarning, stacklevel=2)
    spark.dataSource.register(GroupwireDataSource)


class GroupwireDataSource(DataSource):
    """``spark.read.format("groupwire")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "groupwire"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_read_schema(schema)
        return BatchReader(parse_source_options(self.options, "batch"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_read_schema(schema)
        return StreamReader(parse_source_options(self.options, "stream"))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(parse_sink_options(self.options), _check_write_schema(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(parse_sink_options(self.options), _check_write_schema(schema))


def _check_read_schema(schema: StructType) -> None:
    if tuple(schema.fieldNames()) != COLUMNS:
        raise OptionError(f"the groupwire source has a fixed schema ({SCHEMA_DDL}); "
                          f"do not pass another: {schema.simpleString()}")


def _check_write_schema(schema: StructType) -> tuple[str, ...]:
    names = tuple(schema.fieldNames())
    if "value" not in names:
        raise OptionError("writing to groupwire needs a 'value' column (binary or string); "
                          f"got {', '.join(names)}")
    extra = sorted(set(names) - WRITE_COLUMNS)
    if extra:
        raise OptionError(f"columns {', '.join(extra)} cannot be written to groupwire "
                          f"(allowed: {', '.join(sorted(WRITE_COLUMNS))})")
    return names


class BatchReader(DataSourceReader):
    """Reads exactly ``[startingOffsets, endingOffsets)`` of every subscribed partition
    (``latest``: the last stable offset under read_committed)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with Planner(opts) as planner:
            tps = planner.partitions()
            earliest, latest, _ = planner.bounds(tps)
        start = resolve_spec("startingOffsets", opts.starting, tps, earliest, latest)
        end = resolve_spec("endingOffsets", opts.ending, tps, earliest, latest)
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise OptionError(
                    f"{tp.topic}[{tp.partition}]: startingOffsets {start[tp]} is past "
                    f"endingOffsets {end[tp]}")
            if end[tp] > start[tp]:
                ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
        return tasks_for(opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)
