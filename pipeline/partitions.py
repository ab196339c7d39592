"""A read's Spark partitions: one offset range each, planned on the driver, read on a worker.

Shared by the batch reader (:mod:`groupwire.pipeline.source`) and the streaming reader
(:mod:`groupwire.pipeline.stream`): both plan ranges, cut them with :func:`tasks_for` and
read a partition with :func:`read_partition`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from groupwire.pipeline.offsets import OffsetRange, split_ranges
from groupwire.pipeline.options import SourceOptions
from groupwire.pipeline.reading import ReadTask, read_range

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
                                    request_timeout_ms=opts.request_timeout_ms,
                                    security=opts.security,
                                    isolation_level=opts.isolation_level))
            for r in split_ranges(ranges, opts.min_partitions)]


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The records of one planned partition, as Arrow batches."""
    if not isinstance(partition, RangePartition) and partition.value is None:
        return iter(())  # Spark runs one empty partition when none were planned
    if not isinstance(partition, RangePartition):
        raise TypeError(f"not a groupwire partition: {partition!r}")
    return read_range(partition.task)
