"""Fetching on the application's loop: positions, prefetches per leader, record buffers.

Each partition is fetched from its leader: one Fetch in flight per leader node covers that
node's assigned, unpaused, owned partitions with an empty buffer (each with the leader
epoch metadata gave, -1 if unknown), and runs while the application processes what the
previous one returned. An answer saying the leader moved (or a lost connection) marks
the metadata stale; the partition is fetched again, at the same offset, from the leader
fresh metadata names. Without a router (tests) every partition goes through ``send``. Answers for a
partition no longer assigned, or whose fetch offset moved (seek, a new assignment), are
dropped; partitions kept across a rebalance keep theirs.

A record that cannot be read (a poison batch an old broker stored) stops its partition:
the records before it are buffered as usual, and once the application has polled them all
:meth:`Fetcher.record_error` hands out a :class:`CorruptRecordError` naming the partition
and offset, at every poll, until a seek moves the partition on. A partition the broker's
ACLs do not let this client read stops the same way, with a
:class:`TopicAuthorizationFailedError` naming the topic, raised once: the poll after it
fetches again (an ACL added meanwhile takes effect), as Kafka's consumer does; so does a
partition answered with any other error code that is not retriable.

Failures are sorted as aiokafka sorts them. Retriable ones (a lost connection, no answer
in time, a retriable error code such as NOT_LEADER_OR_FOLLOWER, the group's generation
moving on) are retried with backoff, the first of a streak logged at info and the rest at
debug. Anything else (an answer that cannot be decoded, a request-level error code that
is not retriable) is kept and raised once from the next poll (:meth:`Fetcher.take_error`)
rather than retried in silence forever; an exception no fetch should raise (a bug) ends
the task, and the consumer's task supervisor raises it from every poll after.

Transaction markers (control batches) are never handed out, at either isolation level,
but the position moves past them, so a marker at the end of a partition is not fetched
again and again. Under ``read_committed`` the Fetch asks for records below the last
stable offset only, and the records of aborted transactions are dropped here, as Kafka's
consumer drops them (:func:`visible_records`).

The consumer's ``key_deserializer`` / ``value_deserializer`` run here, as records are
buffered (None is passed through, never deserialized). One that raises stops the
partition at that record as a record that cannot be read does, with a
:class:`RecordDeserializationError`: a deserializer's bug must not end the fetch task,
nor cost the records around it.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Final

from groupwire.client.cluster import STALE_METADATA_ERRORS
from groupwire.client.commits import GROUP_ERRORS
from groupwire.client.errors import (
    BrokerResponseError,
    ClientClosedError,
    CorruptRecordError,
    GroupwireError,
    OffsetOutOfRangeError,
    RecordDeserializationError,
    error_for,
)
from groupwire.client.subscription import PartitionState, SubscriptionState
from groupwire.client.types import Record, TopicPartition
from groupwire.protocol.batches import (
    CONTROL_ABORT,
    BatchHeader,
    DecodedRecord,
    decode_batches_partial,
)
from groupwire.protocol.errors import ErrorCode, ProtocolError
from groupwire.protocol.messages import (
    AbortedTransaction,
    FetchGroup,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    Request,
)

if TYPE_CHECKING:
    from groupwire.client.cluster import Cluster

__all__ = ["ISOLATION_LEVELS", "READ_COMMITTED", "READ_UNCOMMITTED", "Fetcher", "Sender",
           "Spawn", "visible_records"]

log = logging.getLogger("groupwire.consumer.fetcher")

Sender = Callable[[Request], Awaitable[Any]]
Deserializer = Callable[[bytes], Any]
"""What the consumer's ``key_deserializer`` / ``value_deserializer`` are: stored bytes in,
the application's value out (never called with None)."""
StopError = CorruptRecordError | RecordDeserializationError | BrokerResponseError
Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]
"""Starts the Fetch task: the consumer's task supervisor, or the loop by default."""
EARLIEST = -2
LATEST = -1
READ_UNCOMMITTED: Final = "read_uncommitted"
READ_COMMITTED: Final = "read_committed"
ISOLATION_LEVELS: Final = {READ_UNCOMMITTED: 0, READ_COMMITTED: 1}
"""The consumer's ``isolation_level`` settings and what a Fetch carries for each."""
_CONTROL_KEY: Final = struct.Struct(">hh")


class Fetcher:
    def __init__(self, subs: SubscriptionState, send: Sender, *, auto_offset_reset: str,
                 fetch_max_wait_ms: int, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 52428800, max_partition_fetch_bytes: int = 1048576,
                 retry_backoff_ms: int = 100, spawn: Spawn | None = None,
                 router: Cluster | None = None, key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None,
                 isolation_level: str = READ_UNCOMMITTED) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none'")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be 'read_uncommitted' or "
                             f"'read_committed', got {isolation_level!r}")
        self.isolation_level = isolation_level
        self._read_committed = isolation_level == READ_COMMITTED
        self._subs = subs
        self._send = send
        self._reset = auto_offset_reset
        self._max_wait_ms = fetch_max_wait_ms
        self._min_bytes = fetch_min_bytes
        self._max_bytes = fetch_max_bytes
        self._partition_max_bytes = max_partition_fetch_bytes
        self._backoff = retry_backoff_ms / 1000
        self._spawn = spawn or _loop_task
        self._router = router
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._tasks: dict[int | None, asyncio.Task[None]] = {}  # node -> its Fetch
        self._fetching: dict[int | None, set[TopicPartition]] = {}
        self._last: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._drain_from = 0
        # partition -> (its state then, the fetch offset it stopped at, the error): void
        # once the partition is reassigned or its fetch offset moves (a seek)
        self._stopped: dict[TopicPartition, tuple[PartitionState, int, StopError]] = {}
        self._error: Exception | None = None  # a fetch failure no retry mends: next poll's
        self._failures = 0  # retriable failures in a row (the first is logged at info)
        self.on_done: Callable[[], None] | None = None   # wakes the poll
        self.last_stable: dict[TopicPartition, int] = {}
        """Each partition's last stable offset, as the latest Fetch answer gave it."""

    # --- positions ---------------------------------------------------------------------

    async def update_positions(self, group_id: str | None) -> None:
        """Give every partition without a position one: committed offset, else reset."""
        missing = self._subs.missing_positions()
        if not missing:
            return
        need_reset: list[TopicPartition] = []
        committed: dict[TopicPartition, int] = {}
        unstable: set[TopicPartition] = set()
        fresh = [tp for tp in missing if not self._subs.partitions[tp].reset_needed]
        if group_id is not None and fresh:
            committed, unstable = await self._committed(group_id, fresh)
        for tp in missing:
            st = self._subs.partitions.get(tp)
            if st is None or tp in unstable:
                # a transaction holds offsets for it not yet committed or aborted: asked
                # again at the next poll, rather than reset (Kafka's require_stable)
                continue
            off = committed.get(tp, -1)
            if off >= 0 and not st.reset_needed:
                st.seek(off)
            else:
                need_reset.append(tp)
        if need_reset:
            if self._reset == "none":
                raise _no_reset(need_reset)
            ts = EARLIEST if self._reset == "earliest" else LATEST
            offsets = await self.list_offsets(need_reset, ts)
            for tp, off in offsets.items():
                st = self._subs.partitions.get(tp)
                if st is not None and off >= 0:
                    st.seek(off)

    async def fetch_committed(self, group_id: str, tps: list[TopicPartition],
                              ) -> dict[TopicPartition, int]:
        return (await self._committed(group_id, tps))[0]

    async def _committed(self, group_id: str, tps: list[TopicPartition],
                         ) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
        """The committed offsets of ``tps``, and those with a transaction's offsets
        pending (UNSTABLE_OFFSET_COMMIT)."""
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        resp: OffsetFetchResponse = await self._send(OffsetFetchRequest(
            group_id=group_id,
            topics=[OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                    for t, ps in by_topic.items()]))
        _raise_for(resp.error_code, resp.error_message)
        out: dict[TopicPartition, int] = {}
        unstable: set[TopicPartition] = set()
        for topic in resp.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.NONE:
                    out[TopicPartition(topic.name, p.partition_index)] = p.committed_offset
                elif p.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                    unstable.add(TopicPartition(topic.name, p.partition_index))
        return out, unstable

    async def list_offsets(self, tps: list[TopicPartition], timestamp: int,
                           ) -> dict[TopicPartition, int]:
        if self._router is not None:  # to each partition's leader
            return await self._router.list_offsets(dict.fromkeys(tps, timestamp))
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        resp: ListOffsetsResponse = await self._send(ListOffsetsRequest(topics=[
            ListOffsetsTopic(name=t, partitions=[
                ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in ps])
            for t, ps in by_topic.items()]))
        _raise_for(resp.error_code, resp.error_message)
        out: dict[TopicPartition, int] = {}
        for topic in resp.topics:
            for p in topic.partitions:
                _raise_for(p.error_code, p.error_message)
                out[TopicPartition(topic.name, p.partition_index)] = p.offset
        return out

    # --- fetching ----------------------------------------------------------------------

    @property
    def in_flight(self) -> bool:
        return any(not t.done() for t in self._tasks.values())

    def maybe_fetch(self, group: FetchGroup | None) -> None:
        """Start a Fetch to every leader without one in flight that has fetchable
        partitions; read metadata first when leaders are unknown or stale."""
        busy = {tp for node, tps in self._fetching.items()
                if not self._tasks[node].done() for tp in tps}
        tps = [tp for tp in self._subs.fetchable()
               if tp not in busy and self._stopped_at(tp) is None]
        if not tps:
            return
        by_node: dict[int | None, list[TopicPartition]] = {}
        router = self._router
        unrouted: set[str] = set()
        for tp in tps:
            if router is None:
                by_node.setdefault(None, []).append(tp)
                continue
            leader = router.leader(tp)
            if leader is None or router.stale:
                unrouted.add(tp.topic)
                continue
            by_node.setdefault(leader.node_id, []).append(tp)
        if unrouted and router is not None and (self._refresh is None
                                                or self._refresh.done()):
            self._refresh = self._spawn(self._read_leaders(router, unrouted),
                                        "groupwire-fetch-metadata")
            self._notify_when_done(self._refresh)
        for node, node_tps in by_node.items():
            task = self._tasks.get(node)
            if task is not None and not task.done():
                continue
            task = self._spawn(self._fetch(node, node_tps, group, self._subs.epoch),
                               "groupwire-fetch")
            self._tasks[node] = self._last = task
            self._fetching[node] = set(node_tps)
            self._notify_when_done(task)

    def _notify_when_done(self, task: asyncio.Task[None]) -> None:
        if self.on_done is not None:
            done = self.on_done
            task.add_done_callback(lambda _t: done())

    async def _read_leaders(self, router: Cluster, topics: set[str]) -> None:
        try:
            await router.ensure_leaders(topics)
        except ClientClosedError:
            return
        except (GroupwireError, ProtocolError, OSError) as exc:
            self._failed("metadata for fetching", exc)  # the next poll asks again
            await asyncio.sleep(self._backoff)

    def cancel(self) -> asyncio.Task[None] | None:
        """Cancel every Fetch in flight; returns the latest one's task, to await."""
        for task in [*self._tasks.values(), self._refresh]:
            if task is not None:
                task.cancel()
        self._tasks.clear()
        self._fetching.clear()
        self._refresh = None
        task, self._last = self._last, None
        return task

    async def _fetch(self, node: int | None, tps: list[TopicPartition],
                     group: FetchGroup | None, epoch: int) -> None:
        offsets: dict[TopicPartition, int] = {}
        by_topic: dict[str, list[FetchPartition]] = {}
        for tp in tps:
            # the task starts a loop turn after it was planned: a poll in between may have
            # given the partition up (lost, revoked) or reset its position
            st = self._subs.partitions.get(tp)
            off = st.fetch_offset if st is not None else None
            if off is None:
                continue
            offsets[tp] = off
            leader = self._router.leader(tp) if self._router is not None else None
            by_topic.setdefault(tp.topic, []).append(FetchPartition(
                partition=tp.partition, fetch_offset=off,
                current_leader_epoch=leader.epoch if leader is not None else -1,
                partition_max_bytes=self._partition_max_bytes))
        if not offsets:
            return
        request = FetchRequest(
            max_wait_ms=self._max_wait_ms, min_bytes=self._min_bytes,
            max_bytes=self._max_bytes, group=group,
            isolation_level=ISOLATION_LEVELS[self.isolation_level],
            topics=[FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()])
        try:
            if node is None or self._router is None:
                resp: FetchResponse = await self._send(request)
            else:
                resp = await self._router.send_to(node, request, response_type=FetchResponse,
                                                  timeout_ms=self._fetch_timeout_ms())
        except ClientClosedError:
            return  # the consumer is closing
        except (GroupwireError, ProtocolError, OSError) as exc:
            # anything else (a bug) ends the task: the task supervisor raises it
            if self._router is not None and _retriable(exc):
                self._router.mark_stale()
            self._failed(f"fetch from {_node_name(node)}", exc)
            await asyncio.sleep(self._backoff)
            return
        if resp.error_code in _REFUSED:
            for tp, off in offsets.items():
                self._refuse(tp, off, resp.error_code, resp.error_message,
                             group.group_id if group is not None else None)
            return
        if resp.error_code != ErrorCode.NONE:
            # UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID: membership is handled by heartbeats
            self._failed(f"fetch from {_node_name(node)}", error_for(
                resp.error_code, resp.error_message or "Fetch"))
            await asyncio.sleep(self._backoff)
            return
        self._failures = 0
        # An assignment that changed while the Fetch was out (a cooperative rebalance) does
        # not void the records of partitions kept at the same fetch offset: dropping them
        # would pause exactly the partitions cooperative rebalancing promises not to
        # pause. Only its errors are about a generation that is gone.
        stale = epoch != self._subs.epoch
        failed = False
        for topic in resp.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition_index)
                st = self._subs.partitions.get(tp)
                requested = offsets.get(tp)
                if st is None or requested is None or st.fetch_offset != requested:
                    continue
                if p.error_code in STALE_METADATA_ERRORS and self._router is not None:
                    # the leader moved: fetched again, at this offset, from the new one
                    self._router.mark_stale()
                    failed = True
                    continue
                if stale and p.error_code != ErrorCode.NONE:
                    continue
                if p.high_watermark >= 0:
                    st.highwater = p.high_watermark
                if p.last_stable_offset >= 0:
                    self.last_stable[tp] = p.last_stable_offset
                if p.error_code == ErrorCode.PARTITION_NOT_OWNED:
                    st.owned = False  # until the next assignment
                    continue
                if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    st.reset_needed = True  # the next poll applies auto_offset_reset
                    continue
                if p.error_code in _REFUSED or (p.error_code != ErrorCode.NONE
                                                and not _retriable_code(p.error_code)):
                    # ACLs, or an error no retry mends: the app is told, as aiokafka does
                    self._refuse(tp, requested, p.error_code, p.error_message,
                                 group.group_id if group is not None else None)
                    continue
                if p.error_code != ErrorCode.NONE:
                    log.debug("fetch of %s: %s, retrying", tp,
                              ErrorCode.name_of(p.error_code))
                    failed = True
                    continue
                if not p.records:
                    continue
                batches, bad = decode_batches_partial(p.records, requested)
                decoded, end = visible_records(
                    batches, read_committed=self._read_committed,
                    aborted=p.aborted_transactions,
                    stop=bad.offset if bad is not None else None)
                if self._key_deserializer is None and self._value_deserializer is None:
                    t, part = tp
                    for r in decoded:
                        st.buffer.append(Record(t, part, r.offset, r.key, r.value,
                                                r.timestamp_ms, r.headers))
                    unread = None
                else:
                    decoded, unread = self._deserialize(tp, st, decoded)
                if decoded:
                    st.fetch_offset = decoded[-1].offset + 1
                if unread is None and st.fetch_offset is not None and end > st.fetch_offset:
                    st.fetch_offset = end  # past markers and aborted records: never handed out
                    if not st.buffer:
                        st.position = end
                if unread is not None:
                    log.warning("cannot read %s at offset %d: %s", tp, unread.offset,
                                unread.message)
                    self._stopped[tp] = (st, st.fetch_offset, unread)
                elif bad is not None:
                    at = st.fetch_offset
                    offset = bad.offset if bad.offset >= 0 else at
                    log.warning("cannot read %s at offset %d: %s", tp, offset, bad.message)
                    self._stopped[tp] = (st, at, CorruptRecordError(tp, offset, bad.message))
        if failed:  # answered at once with an error: do not spin
            await asyncio.sleep(self._backoff)

    def _deserialize(self, tp: TopicPartition, st: PartitionState,
                     decoded: list[DecodedRecord],
                     ) -> tuple[list[DecodedRecord], RecordDeserializationError | None]:
        """Buffer ``decoded`` as the deserializers read them; the records buffered, and
        the error of the first one a deserializer raised for (the rest are fetched
        again once a seek moves the partition on)."""
        kd, vd = self._key_deserializer, self._value_deserializer
        t, part = tp
        for i, r in enumerate(decoded):
            key: Any = r.key
            value: Any = r.value
            which = "key"
            try:
                if kd is not None and key is not None:
                    key = kd(key)
                which = "value"
                if vd is not None and value is not None:
                    value = vd(value)
            except Exception as exc:  # the application's code: told, not a dead task
                return decoded[:i], RecordDeserializationError(tp, r.offset, which, exc)
            st.buffer.append(Record(t, part, r.offset, key, value, r.timestamp_ms,
                                    r.headers))
        return decoded, None

    def _refuse(self, tp: TopicPartition, at: int, code: int, message: str | None,
                group_id: str | None) -> None:
        st = self._subs.partitions.get(tp)
        if st is None or st.fetch_offset != at:
            return
        log.warning("fetch of %s failed: %s", tp, ErrorCode.name_of(code))
        self._stopped[tp] = (st, at, error_for(code, message or f"Fetch of {tp}",
                                                topic=tp.topic, group_id=group_id))

    def _failed(self, what: str, exc: Exception) -> None:
        """A retriable failure is logged (info for the first of a streak, then debug) and
        retried; any other is kept for :meth:`take_error` and logged at warning."""
        if _retriable(exc):
            self._failures += 1
            level = logging.INFO if self._failures == 1 else logging.DEBUG
            log.log(level, "%s failed (retrying): %s", what, str(exc) or repr(exc))
            return
        log.warning("%s failed: %s", what, str(exc) or repr(exc))
        if self._error is None:
            self._error = exc

    def take_error(self) -> Exception | None:
        """The latest fetch failure that no retry mends (an answer that cannot be
        decoded, an error code that is not retriable), handed out once: the consumer
        raises it from its next poll, as aiokafka raises its fetcher's errors."""
        err, self._error = self._error, None
        return err

    def _fetch_timeout_ms(self) -> int:
        """A Fetch waits up to max_wait_ms at the broker: the answer may take that long."""
        assert self._router is not None
        return self._router.request_timeout_ms + self._max_wait_ms

    def record_error(self, only: set[TopicPartition]) -> StopError | None:
        """The error of a partition stopped at a record it cannot read (or deserialize),
        once every record before it has been polled (never instead of them); of ``only``
        if given. Stays until the partition is sought elsewhere, as Kafka's consumer does;
        a refusal by the broker's ACLs is handed out once."""
        for tp in list(self._stopped):
            at = self._stopped_at(tp)
            if at is None:
                continue
            st = self._subs.partitions[tp]
            if not st.paused and not st.buffer and st.position == at and (not only
                                                                          or tp in only):
                err = self._stopped[tp][2]
                if not isinstance(err, CorruptRecordError | RecordDeserializationError):
                    del self._stopped[tp]
                return err
        return None

    def _stopped_at(self, tp: TopicPartition) -> int | None:
        """The fetch offset ``tp`` is stopped at, or None (dropping a void stop)."""
        stop = self._stopped.get(tp)
        if stop is None:
            return None
        st, at, _err = stop
        if self._subs.partitions.get(tp) is not st or st.fetch_offset != at:
            del self._stopped[tp]
            return None
        return at

    def drain(self, max_records: int) -> dict[TopicPartition, list[Record[Any, Any]]]:
        """Take up to ``max_records`` buffered records of unpaused partitions.

        Each drain starts one partition further on, so buffers empty evenly and the next
        Fetch covers them all, instead of one partition's long poll holding back the rest.
        """
        out: dict[TopicPartition, list[Record[Any, Any]]] = {}
        left = max_records
        items = list(self._subs.partitions.items())
        if not items:
            return out
        start = self._drain_from % len(items)
        self._drain_from = start + 1
        for tp, st in items[start:] + items[:start]:
            if left <= 0:
                break
            if st.paused or not st.buffer:
                continue
            buf = st.buffer
            n = min(left, len(buf))
            taken = [buf.popleft() for _ in range(n)]
            out[tp] = taken
            st.position = taken[-1].offset + 1
            if not buf and st.fetch_offset is not None and st.fetch_offset > st.position:
                st.position = st.fetch_offset  # the markers (or aborted records) after them
            left -= n
        return out


def visible_records(batches: Sequence[tuple[BatchHeader, list[DecodedRecord]]], *,
                    read_committed: bool,
                    aborted: Sequence[AbortedTransaction] | None = None,
                    stop: int | None = None) -> tuple[list[DecodedRecord], int]:
    """The records of ``batches`` (:func:`decode_batches_partial`'s, in log order) that
    the application sees, and the offset after the last batch read whole, skipped ones
    included (-1 if none; ``stop``: the offset decoding stopped at, a batch reaching it
    was not read whole).

    As Kafka's consumer: a control batch (a transaction marker) is never handed out.
    Under read_committed, a producer with an aborted transaction whose ``first_offset`` is
    at or before a batch's last offset (``aborted``, as the broker lists them) has its
    transactional batches skipped from there until its abort marker; its batches outside
    a transaction, and every other producer's, are kept.
    """
    out: list[DecodedRecord] = []
    end = -1
    pending = sorted(aborted or (), key=lambda a: a.first_offset) if read_committed else []
    next_aborted = 0
    aborting: set[int] = set()
    for header, records in batches:
        if stop is None or header.next_offset <= stop:
            end = max(end, header.next_offset)
        if header.producer_id < 0:  # no producer: no transaction (layouts v0, v1)
            out.extend(records)
            continue
        if read_committed:
            last = header.last_offset
            while next_aborted < len(pending) and pending[next_aborted].first_offset <= last:
                aborting.add(pending[next_aborted].producer_id)
                next_aborted += 1
            if header.is_control:
                if _is_abort_marker(records):
                    aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
        if not header.is_control:
            out.extend(records)
    return out, end


def _is_abort_marker(records: list[DecodedRecord]) -> bool:
    """Whether a control batch's record is an abort marker (Kafka's control key: int16
    version, int16 type; the type alone is read, as Kafka reads it)."""
    if not records:
        return False
    key = records[0].key
    return (key is not None and len(key) >= _CONTROL_KEY.size
            and _CONTROL_KEY.unpack_from(key)[1] == CONTROL_ABORT)


def _loop_task(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(coro, name=name)


_REFUSED = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                      ErrorCode.GROUP_AUTHORIZATION_FAILED,
                      ErrorCode.CLUSTER_AUTHORIZATION_FAILED})
"""Fetch answers the broker's ACLs gave: raised from the next poll, not retried blindly."""


def _retriable_code(code: int) -> bool:
    """Kafka's retriable codes, the ones meaning the group's generation moved on (the
    membership rejoins; the next Fetch carries the new generation), and the ones meaning
    the leaders known are out of date."""
    if code in GROUP_ERRORS or code in STALE_METADATA_ERRORS:
        return True
    try:
        return ErrorCode(code).retriable
    except ValueError:  # a code this version does not know
        return False


def _retriable(exc: BaseException) -> bool:
    """Whether a fetch failure mends by itself: a lost or refused connection, no answer
    in time, or an answer with a retriable error code."""
    if isinstance(exc, BrokerResponseError):
        return _retriable_code(exc.raw_code) or isinstance(exc, ConnectionError)
    return isinstance(exc, OSError)  # ConnectionError, TimeoutError and the like


def _node_name(node: int | None) -> str:
    return "the coordinator" if node is None else f"node {node}"


def _raise_for(code: int, message: str | None) -> None:
    if code != ErrorCode.NONE:
        raise error_for(code, message or "")


def _no_reset(tps: list[TopicPartition]) -> Exception:
    return OffsetOutOfRangeError(f"no committed offset and auto_offset_reset='none': {tps}")
