"""Writing rows to topics: ``df.write.format("groupwire")`` and ``writeStream``.

Each write task runs a :class:`~groupwire.client.producer.Producer` on its own
``asyncio.Runner`` and waits until every record is acknowledged before it reports
success, so a committed Spark job means every row is stored. Columns: ``value`` (binary
or string; required), and optional ``key`` (binary or string), ``topic`` (else the
``topic`` option), ``partition`` (else the producer picks: murmur2 of the key, or
sticky), ``headers`` (``array<struct<key: string, value: binary>>``, as the source
returns them).

Delivery is **at-least-once** by default. A task that fails after some of its records were
stored is retried by Spark and writes them again, and a streaming micro-batch that Spark
replays after a crash (its batch id was written to the offset log but not to the commit
log) is produced again in full. Consumers that must not see a record twice deduplicate,
for example on a key they put in the row.

With the ``transactionalIdPrefix`` option the sink is **exactly-once** for read_committed
readers. Spark's write tasks run in separate Python workers, so no producer (nor
transaction) can span a micro-batch; instead each task writes its share in one
transaction of its own, with the transactional id ``<prefix>-<task's partition id>``,
which is the same for every attempt of the task, in this run or after a restart. Starting
the producer (InitProducerId) fences an earlier attempt still alive and ends the
transaction it left: aborted if open, its outcome final if it was committing. In the same
transaction the task commits a *marker*: an offset of the consumer group named like the
transactional id, whose value is the micro-batch id and whose metadata names the query
(Spark's query id, kept in the checkpoint). Before writing, a task reads the marker: if it
says this query's batch (or a later one) committed, the batch is a replay (Spark crashed
after the task's commit and before its own commit log entry) and the task writes nothing.
So a micro-batch's rows become visible once, whatever Spark repeats. TxnOffsetCommit
needs an existing partition: the marker is kept against partition 0 of the first topic
the task writes to.

This relies on what Spark's replay promises: the same offsets, read and split into
tasks the same way, so task ``P`` of a replayed batch holds the rows it held before (keep
the query's plan and options across a restart). A task with no rows writes nothing and
opens no transaction. One prefix serves one query at a time: two queries with one prefix
fence each other's tasks. A batch write (``df.write``) with the prefix also writes each
task in one transaction, its marker naming the write (an id made when Spark plans it), so
a retried task does not write twice; a job that fails keeps what its finished tasks
committed, as a batch job's output does with any sink that has no job-wide commit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any, Final

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from groupwire.client.admin import Admin
from groupwire.client.producer import Producer
from groupwire.client.security import SecurityConfig
from groupwire.client.types import OffsetAndMetadata, RecordMetadata, TopicPartition
from groupwire.pipeline.options import SinkOptions
from groupwire.pipeline.reading import loop_factory

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("groupwire.pipeline")

_SETTLE_EVERY = 20000
"""Acknowledgements are awaited in chunks so a large task holds few pending futures."""

BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
"""The local property Spark's micro-batch execution sets on the jobs of a batch (its id),
which a task reads from its TaskContext."""
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
"""Likewise the query's id: kept in the checkpoint's metadata, so the same after a restart."""
MARKER_SINK: Final = "groupwire-spark"
"""A marker's metadata says it is this sink's, so no other offset is taken for one."""


class WriteError(RuntimeError):
    """A row could not be produced; the message says which and why."""


@dataclass
class WrittenCount(WriterCommitMessage):
    """What one write task produced; ``replayed``: its output was committed already (a
    replay, exactly-once only), so it wrote nothing."""

    records: int
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class TaskTransaction:
    """An exactly-once task's transaction: its id, and the marker it checks and commits
    (``scope``: the query's id, or a batch write's; ``batch``: the micro-batch id, 0 for a
    batch write)."""

    transactional_id: str
    scope: str
    batch: int


def marker_metadata(scope: str) -> str:
    """The committed metadata of a marker of ``scope``."""
    return json.dumps({"sink": MARKER_SINK, "scope": scope}, separators=(",", ":"))


def committed_already(committed: Mapping[TopicPartition, OffsetAndMetadata],
                      scope: str, batch: int) -> bool:
    """Whether the marker group's offsets say ``batch`` of ``scope`` (or a later batch of
    it) was committed: offsets that are not this sink's markers, or name another query
    (the prefix reused, a new checkpoint), say nothing."""
    for om in committed.values():
        try:
            meta = json.loads(om.metadata)
        except ValueError:
            continue
        if (isinstance(meta, dict) and meta.get("sink") == MARKER_SINK
                and meta.get("scope") == scope and om.offset >= batch):
            return True
    return False


def task_transaction(opts: SinkOptions, write_scope: str | None) -> TaskTransaction | None:
    """The running task's transaction (None when the sink is at-least-once).
    ``write_scope``: a batch write's id; None for a micro-batch, whose query and batch
    ids Spark gives the task as local properties."""
    prefix = opts.transactional_id_prefix
    if prefix is None:
        return None
    ctx = TaskContext.get()
    if ctx is None:
        raise WriteError("an exactly-once write runs in a Spark task (no TaskContext)")
    transactional_id = f"{prefix}-{ctx.partitionId()}"
    if write_scope is not None:
        return TaskTransaction(transactional_id, write_scope, 0)
    query, batch = ctx.getLocalProperty(QUERY_ID_PROPERTY), ctx.getLocalProperty(
        BATCH_ID_PROPERTY)
    if query is None or batch is None:
        raise WriteError(f"an exactly-once streaming write needs Spark's "
                         f"{QUERY_ID_PROPERTY!r} and {BATCH_ID_PROPERTY!r} (micro-batch "
                         "execution); this task has none")
    return TaskTransaction(transactional_id, query, int(batch))


def _bytes(value: Any, column: str, row: int) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise WriteError(f"row {row}: column {column!r} must be binary or string, "
                     f"got {type(value).__name__}")


def _headers(value: Any, row: int) -> list[tuple[str, bytes | None]] | None:
    if not value:
        return None
    out: list[tuple[str, bytes | None]] = []
    for item in value:
        name = item.get("key") if isinstance(item, dict) else None
        if not isinstance(name, str):
            raise WriteError(f"row {row}: a header has no string 'key'")
        out.append((name, _bytes(item.get("value"), "headers.value", row)))
    return out


def produce_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch],
                    txn: TaskTransaction | None = None) -> WrittenCount:
    """Produce every row of ``batches``, in ``txn`` when given; returns how many once all
    are acknowledged (committed, with ``txn``)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        if txn is None:
            return WrittenCount(runner.run(_produce(opts, batches)))
        return runner.run(_produce_in_transaction(opts, batches, txn))


def _producer(opts: SinkOptions, security: SecurityConfig,
              transactional_id: str | None = None) -> Producer:
    return Producer(opts.bootstrap, client_id="groupwire-spark-writer",
                    linger_ms=opts.linger_ms, max_batch_bytes=opts.max_batch_bytes,
                    request_timeout_ms=opts.request_timeout_ms, security=security,
                    transactional_id=transactional_id,
                    transaction_timeout_ms=opts.transaction_timeout_ms)


async def _produce(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    async with _producer(opts, opts.security.config()) as producer:
        count, _ = await _send_rows(producer, opts, batches)
    return count


async def _produce_in_transaction(opts: SinkOptions, batches: Iterator[pa.RecordBatch],
                                  txn: TaskTransaction) -> WrittenCount:
    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return WrittenCount(0)  # nothing to write: no transaction, no marker
    security = opts.security.config()
    tid = txn.transactional_id
    # start() fences an earlier attempt of this task and ends its transaction (aborted,
    # or completed if it was committing), so the marker read next is final.
    async with _producer(opts, security, tid) as producer:
        async with Admin(opts.bootstrap, client_id="groupwire-spark-writer",
                         request_timeout_ms=opts.request_timeout_ms,
                         security=security) as admin:
            committed = await admin.list_consumer_group_offsets(tid)
        if committed_already(committed, txn.scope, txn.batch):
            log.info("groupwire sink: %s already committed batch %d of %s; replay writes "
                     "nothing", tid, txn.batch, txn.scope)
            return WrittenCount(0, replayed=True)
        # An exception from here on leaves the transaction open: closing the producer
        # aborts it (and a fenced producer's was aborted by the one that fenced it).
        await producer.begin_transaction()
        count, marker_topic = await _send_rows(producer, opts, chain([first], batches))
        assert marker_topic is not None  # first has rows
        try:
            await producer.send_offsets_to_transaction(
                {TopicPartition(marker_topic, 0):
                 OffsetAndMetadata(txn.batch, marker_metadata(txn.scope))}, tid)
            await producer.commit_transaction()
        except Exception as exc:
            raise WriteError(f"transaction {tid!r} (batch {txn.batch}) did not commit: "
                             f"{exc}") from exc
    return WrittenCount(count)


async def _send_rows(producer: Producer, opts: SinkOptions,
                     batches: Iterator[pa.RecordBatch]) -> tuple[int, str | None]:
    """Send every row and wait for every acknowledgement; returns how many, and the topic
    of the first (None: there were none)."""
    count = 0
    first_topic: str | None = None
    pending: list[asyncio.Future[RecordMetadata]] = []
    for batch in batches:
        names = batch.schema.names
        cols = {name: batch.column(i).to_pylist() for i, name in enumerate(names)}
        n = batch.num_rows
        values = cols["value"]
        keys = cols.get("key", [None] * n)
        topics = cols.get("topic", [None] * n)
        parts = cols.get("partition", [None] * n)
        hdrs = cols.get("headers", [None] * n)
        for i in range(n):
            row = count + i
            topic = topics[i] or opts.topic
            if topic is None:
                raise WriteError(f"row {row}: no topic (null 'topic' column and no "
                                 "'topic' option)")
            try:
                pending.append(await producer.send(
                    topic, _bytes(values[i], "value", row), _bytes(keys[i], "key", row),
                    partition=parts[i], headers=_headers(hdrs[i], row)))
            except WriteError:
                raise
            except Exception as exc:
                raise WriteError(f"row {row}: cannot produce to {topic!r}: {exc}"
                                 ) from exc
            if first_topic is None:
                first_topic = topic
            if len(pending) >= _SETTLE_EVERY:
                await _settle(pending)
        count += n
    await producer.flush()
    await _settle(pending)
    return count, first_topic


async def _settle(pending: list[asyncio.Future[RecordMetadata]]) -> None:
    try:
        await asyncio.gather(*pending)
    except Exception as exc:
        raise WriteError(f"a record was not acknowledged: {exc}") from exc
    finally:
        pending.clear()


class BatchWriter(DataSourceArrowWriter):
    """``df.write``: each task one transaction with ``transactionalIdPrefix``, its marker
    naming this write (``write_id``, made here when Spark plans the write, so the same in
    every attempt of a task)."""

    def __init__(self, opts: SinkOptions, columns: tuple[str, ...]) -> None:
        self.opts = opts
        self.columns = columns
        self.write_id = f"write-{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenCount:
        return produce_batches(self.opts, iterator, task_transaction(self.opts, self.write_id))


class StreamWriter(DataSourceStreamArrowWriter):
    """At-least-once, or exactly-once with ``transactionalIdPrefix`` (see the module doc)."""

    def __init__(self, opts: SinkOptions, columns: tuple[str, ...]) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenCount:
        return produce_batches(self.opts, iterator, task_transaction(self.opts, None))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task already waited for its acknowledgements (or committed its
        transaction); nothing is left to do but say which tasks found a replay."""
        replayed = sum(1 for m in messages if isinstance(m, WrittenCount) and m.replayed)
        if replayed:
            log.info("groupwire sink: batch %d replayed; %d task(s) had committed it "
                     "already and wrote nothing", batchId, replayed)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records a failed task stored stay stored (at-least-once), or were aborted with
        its transaction (exactly-once); those of tasks that committed stay committed, and
        a replay of the batch skips those tasks. Spark retries."""
