"""Look-ups that plan a read: which partitions are subscribed, where their logs start and end.

Runs where Spark plans (a Python planning worker for batch reads, the long-lived stream
reader process for streams) on its own ``asyncio.Runner``, never on a loop of the caller.
"""

from __future__ import annotations

import asyncio
import re

from groupwire.client.cluster import Cluster
from groupwire.client.errors import error_for
from groupwire.pipeline.offsets import EARLIEST, LATEST, Positions, TopicPartition
from groupwire.pipeline.options import SourceOptions
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)


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

    def bounds(self, tps: list[TopicPartition]) -> tuple[Positions, Positions]:
        """``(earliest, latest)`` offsets of each partition (latest = the high watermark)."""
        return self._runner.run(self._bounds(tps))

    async def _bounds(self, tps: list[TopicPartition]) -> tuple[Positions, Positions]:
        if not tps:
            return {}, {}
        return await self._list(tps, EARLIEST), await self._list(tps, LATEST)

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
