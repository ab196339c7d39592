"""Reading one offset range inside a Spark Python worker, as Arrow record batches.

Each read task owns an ``asyncio.Runner`` and one connection (the SDK's
:class:`~groupwire.client.cluster.Cluster`), and fetches its range with plain Fetch
requests: no consumer group, since Spark's checkpoint owns the offsets. The next Fetch
is sent before the current answer is decoded, so the broker works while the task builds
columns. Record bytes are handed out as stored: ``key`` and ``value`` are exactly what
the producer sent.

Transactions as the SDK's consumer sees them: a transaction marker (control batch) is
never a row, at either isolation level, but its offset counts as read, so a range that
ends on one completes. A read_committed task fetches with isolation level 1 (its range
ends at or below the last stable offset the planner saw) and drops the records of
aborted transactions by the answer's ``aborted_transactions``, deciding batch by batch
with the SDK's own :func:`~groupwire.client.fetcher.visible_records`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

from groupwire.client.cluster import Cluster
from groupwire.client.fetcher import (
    ISOLATION_LEVELS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    visible_records,
)
from groupwire.pipeline.offsets import OffsetRange
from groupwire.pipeline.options import ClientSecurity
from groupwire.pipeline.schema import arrow_schema, headers_type
from groupwire.protocol.batches import (
    BatchHeader,
    CorruptBatchError,
    DecodedRecord,
    decode_records_partial,
    iter_batch_spans,
    record_problem,
)
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    AbortedTransaction,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
)

try:
    import uvloop

    _uvloop_loop: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
except ImportError:  # uvloop is not installed on Windows: asyncio's own loop serves
    _uvloop_loop = None

log = logging.getLogger("groupwire.pipeline")

FETCH_MAX_WAIT_MS = 200
"""How long a Fetch may wait for records that ListOffsets said exist (fsync lag)."""


_Chunk = tuple[list[Any], int, int]
"""Decoded records of one batch (cut to the range), the first one's offset, the base
timestamp."""


class DataLossError(RuntimeError):
    """Records of a planned range are gone (retention, a deleted or recreated topic)."""


class ReadError(RuntimeError):
    """A Fetch failed; the message names the topic, partition and offset."""


@dataclass(frozen=True, slots=True)
class ReadTask:
    """Everything one read task needs; it travels pickled to the worker."""

    bootstrap: str
    range: OffsetRange
    fail_on_data_loss: bool
    fetch_max_bytes: int
    request_timeout_ms: int
    security: ClientSecurity = field(default_factory=ClientSecurity)
    """Property strings: the worker builds its TLS context from them."""
    isolation_level: str = READ_UNCOMMITTED
    """Kafka's ``read_uncommitted`` or ``read_committed`` (the range then ends at or below
    the last stable offset the planner saw)."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when installed (as the broker and CLI run), else asyncio's."""
    return _uvloop_loop


def read_range(task: ReadTask) -> Iterator[pa.RecordBatch]:
    """The records of ``task.range`` in offset order, one Arrow batch per Fetch answer."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        chunks = _fetch_chunks(task)
        try:
            while True:
                try:
                    raw, topic, part = runner.run(chunks.__anext__())
                except StopAsyncIteration:
                    return
                try:
                    batch = _to_arrow(raw, topic, part)
                except (TypeError, ValueError, pa.ArrowException) as exc:
                    raise _unreadable(raw, topic, part, exc) from exc
                if batch is not None:
                    yield batch
        finally:
            runner.run(chunks.aclose())


async def _fetch_chunks(task: ReadTask,
                        ) -> AsyncGenerator[tuple[list[_Chunk], str, int], None]:
    """The decoded records of each Fetch answer, cut to the range."""
    r = task.range
    cluster = Cluster(task.bootstrap, client_id="groupwire-spark",
                      request_timeout_ms=task.request_timeout_ms,
                      security=task.security.config())
    where = f"{r.topic}[{r.partition}]"
    read_committed = task.isolation_level == READ_COMMITTED
    loop = asyncio.get_running_loop()
    held_since: float | None = None  # when an open transaction first held the range up
    pending: asyncio.Task[FetchResponse] | None = None
    try:
        offset = r.start
        pending = asyncio.ensure_future(_fetch(cluster, task, offset))
        while offset < r.end:
            assert pending is not None
            resp = await pending
            pending = None
            part = _only_partition(resp, r, offset)
            code = part.error_code
            if code == ErrorCode.OFFSET_OUT_OF_RANGE or (
                    code == ErrorCode.NONE and not part.records
                    and 0 <= part.high_watermark <= offset):
                offset = _lost(task, offset, part.log_start_offset, part.high_watermark)
                if offset < r.end:
                    pending = asyncio.ensure_future(_fetch(cluster, task, offset))
                continue
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                _lost(task, offset, -1, -1)
                return
            if code != ErrorCode.NONE:
                raise ReadError(f"fetch of {where} at offset {offset} failed: "
                                f"{ErrorCode.name_of(code)} {part.error_message or ''}".strip())
            if not part.records:
                if read_committed and 0 <= part.last_stable_offset <= offset:
                    # the range reaches into a transaction still open (an explicit
                    # endingOffsets past the last stable offset): wait for it to end
                    held_since = loop.time() if held_since is None else held_since
                    if loop.time() - held_since > task.request_timeout_ms / 1000:
                        raise ReadError(
                            f"{where} offsets {offset}-{r.end - 1} are past the last "
                            f"stable offset {part.last_stable_offset}: a transaction open "
                            f"there did not end within {task.request_timeout_ms} ms "
                            "(requestTimeoutMs); read_committed reads only below it")
                pending = asyncio.ensure_future(_fetch(cluster, task, offset))
                continue
            held_since = None
            try:
                spans = list(iter_batch_spans(part.records))
            except CorruptBatchError as exc:
                raise ReadError(f"corrupt batch in {where} near offset {offset}: "
                                f"{exc.message}") from exc
            next_offset = spans[-1][0].next_offset if spans else offset
            if next_offset < r.end:
                pending = asyncio.ensure_future(_fetch(cluster, task, next_offset))
                await asyncio.sleep(0)  # let the request leave before decoding
            view = memoryview(part.records)
            shown = _visible(spans, view, part.aborted_transactions, read_committed)
            rows_out: list[_Chunk] = []
            for (header, start, end), visible in zip(spans, shown, strict=True):
                if (not visible or header.next_offset <= offset
                        or header.base_offset >= r.end):
                    continue
                try:
                    rows = msgpack.unpackb(view[start + header.header_size:end], raw=False)
                except (ValueError, TypeError, msgpack.UnpackException):
                    rows = _rows_around_bad(bytes(view[start:end]), header, offset, r.end,
                                            where)
                if not isinstance(rows, list) or len(rows) != header.record_count:
                    raise ReadError(f"records of {where} at offset {header.base_offset} "
                                    "do not match the batch header")
                skip = max(0, offset - header.base_offset)
                stop = min(header.record_count, r.end - header.base_offset)
                rows_out.append((rows[skip:stop] if skip or stop < len(rows) else rows,
                                 header.base_offset + skip, header.base_timestamp_ms))
            offset = min(next_offset, r.end)
            if rows_out:
                yield rows_out, r.topic, r.partition
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending
        await cluster.close()


def _visible(spans: list[tuple[BatchHeader, int, int]], view: memoryview,
             aborted: list[AbortedTransaction] | None, read_committed: bool) -> list[bool]:
    """Whether each batch of a Fetch answer holds rows: a marker's never; under
    read_committed, an aborted transaction's neither. The SDK's :func:`visible_records`
    decides, fed one stand-in record per batch (a marker's carries its key, commit or
    abort), so the records themselves are decoded only for the batches kept."""
    if not any(h.is_transactional or h.is_control for h, _, _ in spans):
        return [True] * len(spans)
    if not read_committed:
        return [not h.is_control for h, _, _ in spans]
    batches = [(header, [DecodedRecord(i, 0, _marker_key(view, header, start, end)
                                       if header.is_control else None, None, [])])
               for i, (header, start, end) in enumerate(spans)]
    kept = {r.offset for r in visible_records(batches, read_committed=True,
                                              aborted=aborted)[0]}
    return [i in kept for i in range(len(spans))]


def _marker_key(view: memoryview, header: BatchHeader, start: int, end: int,
                ) -> bytes | None:
    """A control batch's record key (Kafka's control key: version, commit or abort), or
    None when it does not unpack (read as no abort marker, as the SDK reads one)."""
    try:
        rows = msgpack.unpackb(view[start + header.header_size:end], raw=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    if isinstance(rows, list) and rows and isinstance(rows[0], list) and len(rows[0]) > 2:
        key = rows[0][2]
        return key if isinstance(key, bytes) else None
    return None


async def _fetch(cluster: Cluster, task: ReadTask, offset: int) -> FetchResponse:
    r = task.range
    request = FetchRequest(
        max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1, max_bytes=task.fetch_max_bytes,
        isolation_level=ISOLATION_LEVELS[task.isolation_level],
        topics=[FetchTopic(topic=r.topic, partitions=[FetchPartition(
            partition=r.partition, fetch_offset=offset,
            partition_max_bytes=task.fetch_max_bytes)])])
    try:
        resp = await cluster.send(request, response_type=FetchResponse)
    except Exception as exc:
        raise ReadError(f"fetch of {r.topic}[{r.partition}] at offset {offset} failed: "
                        f"{exc}") from exc
    if resp.error_code != ErrorCode.NONE:
        raise ReadError(f"fetch of {r.topic}[{r.partition}] at offset {offset} refused: "
                        f"{ErrorCode.name_of(resp.error_code)}")
    return resp


def _only_partition(resp: FetchResponse, r: OffsetRange, offset: int) -> Any:
    for topic in resp.responses:
        for part in topic.partitions:
            if topic.topic == r.topic and part.partition_index == r.partition:
                return part
    raise ReadError(f"fetch of {r.topic}[{r.partition}] at offset {offset}: the answer "
                    "has no entry for the partition")


def _lost(task: ReadTask, offset: int, log_start: int, high_watermark: int) -> int:
    """Fail, or report and skip, records of the range that no longer exist; returns where
    reading goes on (the range's end when nothing more can be read)."""
    r = task.range
    if log_start > offset:
        gone_to = min(log_start, r.end)
        what = (f"{r.topic}[{r.partition}] offsets {offset}-{gone_to - 1} were deleted "
                f"(log now starts at {log_start}) before they were read")
        resume = gone_to
    elif log_start < 0:
        what = (f"{r.topic}[{r.partition}] offsets {offset}-{r.end - 1} cannot be read: "
                "the topic or partition no longer exists")
        resume = r.end
    else:
        what = (f"{r.topic}[{r.partition}] offsets {offset}-{r.end - 1} are past the log "
                f"end {high_watermark} (topic recreated or truncated?)")
        resume = r.end
    if task.fail_on_data_loss:
        raise DataLossError(what + "; set failOnDataLoss=false to skip lost records")
    log.warning("groupwire data loss, skipped: %s", what)
    return resume


def _rows_around_bad(batch: bytes, header: BatchHeader, offset: int, end: int,
                     where: str) -> list[Any]:
    """The rows of a batch holding a row that does not unpack (a poison batch an old broker
    stored): those before it, placed at their index, when it lies past the range; else a
    ReadError naming its offset."""
    base, base_ts = header.base_offset, header.base_timestamp_ms
    good, bad = decode_records_partial(batch, max(offset, base))
    if bad is not None and bad.offset < end:
        raise ReadError(f"cannot read {where} at offset {bad.offset}: {bad.message}")
    rows: list[Any] = [None] * header.record_count
    for rec in good:
        rows[rec.offset - base] = [rec.offset - base, rec.timestamp_ms - base_ts, rec.key,
                                   rec.value, rec.headers]
    return rows


def _unreadable(chunks: list[_Chunk], topic: str, partition: int,
                exc: Exception) -> ReadError:
    """A ReadError naming the first record of ``chunks`` that is not a record (§5.1), for
    a Fetch answer whose columns could not be built."""
    for rows, first, _base_ts in chunks:
        for i, row in enumerate(rows):
            problem = record_problem(row)
            if problem is not None:
                return ReadError(f"cannot read {topic}[{partition}] at offset {first + i}: "
                                 f"{problem}")
    first = chunks[0][1] if chunks else -1
    return ReadError(f"cannot read {topic}[{partition}] from offset {first}: "
                     f"{type(exc).__name__}: {exc}")


def _to_arrow(chunks: list[_Chunk], topic: str, partition: int,
              ) -> pa.RecordBatch | None:
    """One Arrow batch from the decoded record arrays of one Fetch answer."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[Any] = []
    offsets: list[pa.Array] = []
    stamps: list[pa.Array] = []
    any_headers = False
    for rows, first, base_ts in chunks:
        if not rows:
            continue
        _deltas, ts_deltas, ks, vs, hs = zip(*rows, strict=True)
        keys.extend(ks)
        values.extend(vs)
        headers.extend(hs)
        if not any_headers and any(hs):
            any_headers = True
        offsets.append(pa.array(range(first, first + len(rows)), pa.int64()))
        stamps.append(pc.add(pa.array(ts_deltas, pa.int64()), base_ts))
    n = len(keys)
    if n == 0:
        return None
    htype = headers_type()
    if any_headers:
        header_array = pa.array(
            [[{"key": k, "value": v} for k, v in hs] for hs in headers], type=htype)
    else:
        header_array = pa.ListArray.from_arrays(
            pa.array([0] * (n + 1), pa.int32()),
            pa.array([], htype.value_type), type=htype)
    ms = pa.concat_arrays(stamps) if len(stamps) > 1 else stamps[0]
    micros = pc.multiply(ms, 1000).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays([
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.concat_arrays(offsets) if len(offsets) > 1 else offsets[0],
        micros,
        header_array,
    ], schema=arrow_schema())
