"""Look-ups that plan a read: which partitions are subscribed, where their logs start and end.

Runs where Spark plans (a Python planning worker for batch reads, the long-lived stream
reader process for streams) on its own ``asyncio.Runner``, never on a loop of the caller.

A read_committed read ends where a consumer of that level stops: at the last stable offset,
which ListOffsets does not give (docs/protocol.md §4), so the planner asks a read_committed
Fetch at the high watermark for it, an answer that holds no records (§5.5: none from the
last stable offset on).
"""

from __future__ import annotations

import asyncio
import re
from typing import NamedTuple

from groupwire.client.cluster import Cluster
from groupwire.client.errors import error_for
from groupwire.client.fetcher import ISOLATION_LEVELS, READ_COMMITTED
from groupwire.pipeline.offsets import EARLIEST, LATEST, Positions, TopicPartition
from groupwire.pipeline.options import SourceOptions
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)


class Bounds(NamedTuple):
    """Where each partition's log starts, where a read of it ends now, and its end."""

    earliest: Positions
    latest: Positions
    """The high watermark, or under read_committed the last stable offset (the first
    offset of the earliest transaction still open): records past it are not readable yet."""
    log_end: Positions
    """The high watermark, whatever the isolation level."""


class Planner:
    """One connection for a planning session; ``close()`` when done (or use ``with``)."""

    def __init__(self, opts: SourceOptions) -> None:
        self._opts = opts
        self._runner = asyncio.Runner()
        self._cluster = Cluster(opts.bootstrap, client_id="groupwire-spark-planner",
                                request_timeout_ms=opts.request_timeout_ms,
                                security=opts.security.config())

    def __enter__(self) -> Planner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._runner.run(self._cluster.close())
        finally:
            self._runner.close()

    def partitions(self) -> list[TopicPartition]:
        """Subscribed partitions now; a subscribed topic that does not exist has none."""
        return self._runner.run(self._partitions())

    async def _partitions(self) -> list[TopicPartition]:
        opts = self._opts
        if opts.topics is not None:
            md = await self._cluster.metadata(list(opts.topics),
                                              allow_auto_topic_creation=False)
            counts = {t: md.partitions[t] for t in opts.topics if t in md.partitions}
        else:
            assert opts.pattern is not None
            md = await self._cluster.metadata(None)
            regex = re.compile(opts.pattern)
            counts = {t: n for t, n in md.partitions.items() if regex.fullmatch(t)}
        return sorted(TopicPartition(t, p) for t, n in counts.items() for p in range(n))

    def bounds(self, tps: list[TopicPartition]) -> Bounds:
        """Each partition's earliest offset, where a read ends now, and its log end."""
        return self._runner.run(self._bounds(tps))

    async def _bounds(self, tps: list[TopicPartition]) -> Bounds:
        if not tps:
            return Bounds({}, {}, {})
        earliest, log_end = await self._list(tps, EARLIEST), await self._list(tps, LATEST)
        if self._opts.isolation_level != READ_COMMITTED:
            return Bounds(earliest, log_end, log_end)
        stable, log_end = await self._stable(log_end)
        return Bounds(earliest, stable, log_end)

    async def _stable(self, log_end: Positions) -> tuple[Positions, Positions]:
        """``(last stable offset, high watermark)`` of each partition, from one
        read_committed Fetch at the high watermarks ``log_end`` listed (the answer's
        are as fresh as each other; a broker that sends no LSO has no transactions)."""
        by_topic: dict[str, list[FetchPartition]] = {}
        for tp, off in sorted(log_end.items()):
            by_topic.setdefault(tp.topic, []).append(FetchPartition(
                partition=tp.partition, fetch_offset=off, partition_max_bytes=1))
        resp = await self._cluster.send(FetchRequest(
            max_wait_ms=0, min_bytes=1, max_bytes=1,
            isolation_level=ISOLATION_LEVELS[READ_COMMITTED],
            topics=[FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()]),
            response_type=FetchResponse)
        if resp.error_code != ErrorCode.NONE:
            raise error_for(resp.error_code, resp.error_message or "Fetch")
        stable: Positions = {}
        ends: Positions = {}
        for topic in resp.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition_index)
                if tp not in log_end:
                    continue
                if p.error_code != ErrorCode.NONE:
                    raise error_for(p.error_code, f"Fetch {tp.topic}[{tp.partition}] for "
                                    f"its last stable offset: {p.error_message or ''}")
                ends[tp] = p.high_watermark if p.high_watermark >= 0 else log_end[tp]
                stable[tp] = (p.last_stable_offset if p.last_stable_offset >= 0
                              else ends[tp])
        missing = sorted(set(log_end) - set(stable))
        if missing:
            raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"Fetch for the last stable offset has no answer for {missing}")
        return stable, ends

    async def _list(self, tps: list[TopicPartition], ts: int) -> Positions:
        by_topic: dict[str, list[ListOffsetsPartition]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(
                ListOffsetsPartition(partition_index=tp.partition, timestamp=ts))
        resp = await self._cluster.send(ListOffsetsRequest(topics=[
            ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()]),
            response_type=ListOffsetsResponse)
        if resp.error_code != ErrorCode.NONE:
            raise error_for(resp.error_code, resp.error_message or "ListOffsets")
        out: Positions = {}
        for topic in resp.topics:
            for p in topic.partitions:
                if p.error_code != ErrorCode.NONE:
                    raise error_for(p.error_code, f"ListOffsets {topic.name}[{p.partition_index}]"
                                    f": {p.error_message or ''}")
                out[TopicPartition(topic.name, p.partition_index)] = p.offset
        return out
