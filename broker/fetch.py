"""Fetch: slices of the log served as stored, and the long poll that waits for appends.

A fetch that finds fewer than ``min_bytes`` parks on the partitions it names; an append
that moves one of their high watermarks re-reads only the fetches parked there. Ownership
fencing is checked when the fetch arrives and again when a parked one completes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from groupwire.broker.coordinator import Coordinator
from groupwire.broker.logs import get_logger
from groupwire.broker.storage import TopicStore
from groupwire.broker.storage.errors import StorageError
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
)

log = get_logger("groupwire.fetch")

TopicPartition = tuple[str, int]
Reply = Callable[[FetchResponse], None]


@dataclass(eq=False, slots=True)
class _Parked:
    conn_id: int
    request: FetchRequest
    reply: Reply
    partitions: tuple[TopicPartition, ...]
    handle: asyncio.TimerHandle | None = None
    done: bool = False
    waiting_on: set[TopicPartition] = field(default_factory=set)


class FetchManager:
    def __init__(self, store: TopicStore, coordinator: Coordinator, *, max_response_bytes: int,
                 ownership_fencing: bool) -> None:
        self._store = store
        self._coordinator = coordinator
        self._max_response_bytes = max_response_bytes
        self._fencing = ownership_fencing
        self._waiters: dict[TopicPartition, set[_Parked]] = {}
        self._by_conn: dict[int, set[_Parked]] = {}
        self._dirty: set[TopicPartition] = set()

    def handle(self, conn_id: int, request: FetchRequest, reply: Reply) -> None:
        partitions = tuple(
            (t.topic, p.partition) for t in request.topics for p in t.partitions
        )
        response, ready_bytes, has_error = self._read(request, partitions)
        if (
            has_error
            or ready_bytes >= request.min_bytes
            or request.max_wait_ms <= 0
            or not partitions
        ):
            reply(response)
            return
        parked = _Parked(conn_id, request, reply, partitions)
        loop = asyncio.get_running_loop()
        parked.handle = loop.call_later(request.max_wait_ms / 1000, self._complete, parked)
        for tp in partitions:
            self._waiters.setdefault(tp, set()).add(parked)
            parked.waiting_on.add(tp)
        self._by_conn.setdefault(conn_id, set()).add(parked)

    def appended(self, topic: str, partition: int) -> None:
        """Note that a partition's high watermark may have moved; see :meth:`wake`."""
        if (topic, partition) in self._waiters:
            self._dirty.add((topic, partition))

    def wake(self) -> None:
        """Re-read the fetches parked on partitions that moved since the last wake."""
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, set()
        candidates: set[_Parked] = set()
        for tp in dirty:
            candidates |= self._waiters.get(tp, set())
        for parked in candidates:
            if parked.done:
                continue
            response, ready, has_error = self._read(parked.request, parked.partitions)
            if has_error or ready >= parked.request.min_bytes:
                self._finish(parked, response)

    def connection_closed(self, conn_id: int) -> None:
        for parked in self._by_conn.pop(conn_id, set()):
            parked.done = True
            self._unpark(parked)

    def complete_all(self) -> None:
        """Answer every parked fetch now with what is there (shutdown)."""
        for parked in [p for ps in self._by_conn.values() for p in ps]:
            self._complete(parked)

    def _complete(self, parked: _Parked) -> None:
        if parked.done:
            return
        response, _, _ = self._read(parked.request, parked.partitions)
        self._finish(parked, response)

    def _finish(self, parked: _Parked, response: FetchResponse) -> None:
        parked.done = True
        self._unpark(parked)
        conns = self._by_conn.get(parked.conn_id)
        if conns is not None:
            conns.discard(parked)
            if not conns:
                del self._by_conn[parked.conn_id]
        parked.reply(response)

    def _unpark(self, parked: _Parked) -> None:
        if parked.handle is not None:
            parked.handle.cancel()
        for tp in parked.waiting_on:
            waiters = self._waiters.get(tp)
            if waiters is not None:
                waiters.discard(parked)
                if not waiters:
                    del self._waiters[tp]
        parked.waiting_on.clear()

    def _read(self, request: FetchRequest, partitions: tuple[TopicPartition, ...],
              ) -> tuple[FetchResponse, int, bool]:
        not_owned: frozenset[TopicPartition] = frozenset()
        if request.group is not None and self._fencing:
            check = self._coordinator.check_fetch(request.group, partitions)
            if check.error_code != ErrorCode.NONE:
                return FetchResponse(error_code=check.error_code), 0, True
            not_owned = check.not_owned
        budget = min(request.max_bytes, self._max_response_bytes)
        total = 0
        has_error = False
        topics: list[FetchTopicResponse] = []
        for topic_req in request.topics:
            answers: list[FetchPartitionData] = []
            for part in topic_req.partitions:
                tp = (topic_req.topic, part.partition)
                if tp in not_owned:
                    answers.append(FetchPartitionData(
                        partition_index=part.partition,
                        error_code=ErrorCode.PARTITION_NOT_OWNED,
                        error_message="partition not owned by this member in this generation",
                    ))
                    has_error = True
                    continue
                answer, size = self._read_partition(
                    tp, part.fetch_offset, min(part.partition_max_bytes, budget - total),
                    first_batch_always=total == 0,
                )
                if answer.error_code != ErrorCode.NONE:
                    has_error = True
                total += size
                answers.append(answer)
            topics.append(FetchTopicResponse(topic=topic_req.topic, partitions=answers))
        return FetchResponse(responses=topics), total, has_error

    def _read_partition(self, tp: TopicPartition, offset: int, limit: int, *,
                        first_batch_always: bool) -> tuple[FetchPartitionData, int]:
        topic, partition = tp
        try:
            plog = self._store.log(topic, partition)
        except (KeyError, StorageError):
            return FetchPartitionData(
                partition_index=partition, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=f"unknown topic or partition {topic}-{partition}",
            ), 0
        try:
            data = plog.read(offset, max(limit, 0), first_batch_always=first_batch_always)
        except StorageError as exc:
            if exc.code == ErrorCode.CORRUPT_MESSAGE:
                log.error("corrupt_batch", topic=topic, partition=partition,
                          fetch_offset=offset, error=str(exc))
            return FetchPartitionData(
                partition_index=partition, error_code=exc.code, error_message=str(exc),
                high_watermark=plog.high_watermark, log_start_offset=plog.log_start_offset,
            ), 0
        return FetchPartitionData(
            partition_index=partition, high_watermark=plog.high_watermark,
            log_start_offset=plog.log_start_offset, records=data,
        ), len(data)
