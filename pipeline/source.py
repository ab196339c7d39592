"""The ``groupwire`` PySpark data source and its batch reader.

Spark plans on the driver side and runs ``read()`` on a pickled copy of the reader in
worker processes, so each partition carries a complete :class:`~pipeline.reading.ReadTask`
(address, range, settings): nothing read() needs lives on the reader object.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from groupwire.pipeline.offsets import OffsetRange, resolve_spec, split_ranges
from groupwire.pipeline.options import (
    OptionError,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
)
from groupwire.pipeline.planning import Planner
from groupwire.pipeline.reading import ReadTask, read_range
from groupwire.pipeline.schema import COLUMNS, SCHEMA_DDL, WRITE_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa


class RangePartition(InputPartition):
    """One Spark partition: one offset range of one topic partition."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task)
        self.task = task


def tasks_for(opts: SourceOptions, ranges: list[OffsetRange]) -> list[RangePartition]:
    """Spark partitions for ``ranges``, split to honour ``minPartitions``."""
    return [RangePartition(ReadTask(bootstrap=opts.bootstrap, range=r,
                                    fail_on_data_loss=opts.fail_on_data_loss,
                                    fetch_max_bytes=opts.fetch_max_bytes,
                                    request_timeout_ms=opts.request_timeout_ms))
            for r in split_ranges(ranges, opts.min_partitions)]


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition) and partition.value is None:
        return iter(())  # Spark runs one empty partition when none were planned
    if not isinstance(partition, RangePartition):
        raise TypeError(f"not a groupwire partition: {partition!r}")
    return read_range(partition.task)


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
        from groupwire.pipeline.stream import StreamReader

        _check_read_schema(schema)
        return StreamReader(parse_source_options(self.options, "stream"))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from groupwire.pipeline.writer import BatchWriter

        return BatchWriter(parse_sink_options(self.options), _check_write_schema(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from groupwire.pipeline.writer import StreamWriter

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
    """Reads exactly ``[startingOffsets, endingOffsets)`` of every subscribed partition."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with Planner(opts) as planner:
            tps = planner.partitions()
            earliest, latest = planner.bounds(tps)
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
