"""Writing rows to topics: ``df.write.format("groupwire")`` and ``writeStream``.

Each write task runs a :class:`~groupwire.client.producer.Producer` on its own
``asyncio.Runner`` and waits until every record is acknowledged before it reports
success, so a committed Spark job means every row is stored. Columns: ``value`` (binary
or string; required), and optional ``key`` (binary or string), ``topic`` (else the
``topic`` option), ``partition`` (else the producer picks: murmur2 of the key, or
sticky), ``headers`` (``array<struct<key: string, value: binary>>``, as the source
returns them).

Delivery is **at-least-once**. A task that fails after some of its records were stored is
retried by Spark and writes them again, and a streaming micro-batch that Spark replays
after a crash (its batch id was written to the offset log but not to the commit log) is
produced again in full: there are no producer transactions to roll back. Consumers that
must not see a record twice deduplicate, for example on a key they put in the row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from groupwire.client.producer import Producer
from groupwire.client.types import RecordMetadata
from groupwire.pipeline.options import SinkOptions
from groupwire.pipeline.reading import loop_factory

if TYPE_CHECKING:
    import pyarrow as pa

_SETTLE_EVERY = 20000
"""Acknowledgements are awaited in chunks so a large task holds few pending futures."""


class WriteError(RuntimeError):
    """A row could not be produced; the message says which and why."""


@dataclass
class WrittenCount(WriterCommitMessage):
    """What one write task produced."""

    records: int


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


def produce_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row of ``batches``; returns how many, once all are acknowledged."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_produce(opts, batches))


async def _produce(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    count = 0
    pending: list[asyncio.Future[RecordMetadata]] = []
    async with Producer(opts.bootstrap, client_id="groupwire-spark-writer",
                        linger_ms=opts.linger_ms, max_batch_bytes=opts.max_batch_bytes,
                        request_timeout_ms=opts.request_timeout_ms,
                        security=opts.security.config()) as producer:
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
                if len(pending) >= _SETTLE_EVERY:
                    await _settle(pending)
            count += n
        await producer.flush()
        await _settle(pending)
    return count


async def _settle(pending: list[asyncio.Future[RecordMetadata]]) -> None:
    try:
        await asyncio.gather(*pending)
    except Exception as exc:
        raise WriteError(f"a record was not acknowledged: {exc}") from exc
    finally:
        pending.clear()


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, columns: tuple[str, ...]) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenCount:
        return WrittenCount(produce_batches(self.opts, iterator))


class StreamWriter(DataSourceStreamArrowWriter):
    """At-least-once: a replayed micro-batch is produced again (see the module doc)."""

    def __init__(self, opts: SinkOptions, columns: tuple[str, ...]) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenCount:
        return WrittenCount(produce_batches(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task already waited for its acknowledgements; nothing is left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records a failed task stored stay stored (at-least-once); Spark retries."""
