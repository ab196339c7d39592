"""The Structured Streaming reader: offsets per partition kept in Spark's checkpoint.

Offsets are ``{"topic": {"0": next_offset, ...}}`` with keys in sorted order (see
:mod:`groupwire.pipeline.offsets`). Each trigger looks the partitions up again, so partitions added
while the query runs (and topics newly matching ``subscribePattern``) are read from their
first offset. Records deleted by retention before they were read fail the query, or with
``failOnDataLoss=false`` are reported in the worker's log and skipped. Under
``isolationLevel=read_committed`` the latest offsets are the last stable offsets: a
micro-batch stops at the first record of a transaction still open and reads it in a later
one, once the transaction has ended.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from groupwire.pipeline.offsets import (
    Positions,
    cap,
    from_json,
    ranges_between,
    rate_limit,
    resolve_spec,
    to_json,
)
from groupwire.pipeline.options import SourceOptions
from groupwire.pipeline.partitions import read_partition, tasks_for
from groupwire.pipeline.planning import Bounds, Planner
from groupwire.pipeline.reading import DataLossError

log = logging.getLogger("groupwire.pipeline")


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner: Planner | None = None
        self._target: Positions | None = None
        self._latest: Positions | None = None

    def __getstate__(self) -> dict[str, Any]:
        # read() runs on a pickled copy: the planner's event loop and socket stay here.
        return {"opts": self.opts, "_planner": None, "_target": None, "_latest": None}

    def _plan(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    def _now(self) -> Bounds:
        planner = self._plan()
        return planner.bounds(planner.partitions())

    def initialOffset(self) -> dict[str, Any]:
        planner = self._plan()
        tps = planner.partitions()
        earliest, latest, _ = planner.bounds(tps)
        return to_json(resolve_spec("startingOffsets", self.opts.starting, tps, earliest,
                                    latest))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._now().latest

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else to_json(self._latest)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json(start)
        now = self._now()
        self._latest = now.latest
        end = self._checked_end(begin, now)
        if self._target is not None:
            end = cap(begin, end, self._target)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return to_json(end)

    def _checked_end(self, begin: Positions, now: Bounds) -> Positions:
        """Latest positions, after failing (or reporting) partitions that lost data. A
        position past the last stable offset but within the log (read_committed, a
        transaction open there) waits for it: the partition stays where it is."""
        end: Positions = {}
        for tp, off in now.latest.items():
            lo = begin.get(tp)
            log_end = now.log_end.get(tp, off)
            if lo is not None and log_end < lo:
                self._loss(f"{tp.topic}[{tp.partition}] log end {log_end} is before the "
                           f"query's position {lo} (topic recreated or truncated?)")
            end[tp] = lo if lo is not None and off < lo <= log_end else off
        for tp, lo in begin.items():
            if tp not in now.latest and self.opts.matches(tp.topic):
                self._loss(f"{tp.topic}[{tp.partition}] no longer exists; its records from "
                           f"offset {lo} cannot be read")
        return end

    def _loss(self, what: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(what + "; set failOnDataLoss=false to skip lost records")
        log.warning("groupwire data loss, skipped: %s", what)

    def partitions(self, start: dict[str, Any], end: dict[str, Any],
                   ) -> Sequence[InputPartition]:
        return tasks_for(self.opts, ranges_between(from_json(start), from_json(end)))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: no consumer group, Spark's checkpoint holds the offsets."""

    def stop(self) -> None:
        planner, self._planner = self._planner, None
        if planner is not None:
            planner.close()
