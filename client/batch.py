"""A batch of records the application fills itself and sends whole (aiokafka's batch API).

``Producer.create_batch()`` hands out a :class:`BatchBuilder`; ``append`` packs each
record straight into the batch's bytes (a :class:`~groupwire.protocol.batches.BatchWriter`)
and ``Producer.send_batch`` queues the batch as it is, with one future for all of it: no
future, partitioner call or accumulator step per record, which is what bulk producing
from Python costs most.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from time import time_ns as _time_ns
from typing import Any, NamedTuple

from groupwire.client.accumulator import RECORD_OVERHEAD, headers_size
from groupwire.protocol.batches import BatchWriter

__all__ = ["BatchBuilder", "BatchRecordMetadata"]

Serializer = Callable[[Any], bytes | None]
_new_tuple = tuple.__new__


class BatchRecordMetadata(NamedTuple):
    """What :meth:`BatchBuilder.append` says of a record it took, with aiokafka's names:
    ``offset``, its place in the batch (once sent, its offset is the batch's base offset,
    which ``send_batch``'s RecordMetadata gives, plus this); ``timestamp``, epoch
    milliseconds (``append``'s, or when it was appended); ``size``, the bytes it counts
    against ``max_batch_bytes`` (an estimate: a fixed overhead plus key, value and
    headers)."""

    offset: int
    timestamp: int
    size: int


class BatchBuilder:
    """Records for one partition, filled by the application and sent whole with
    ``Producer.send_batch``; made by ``Producer.create_batch()``, as in aiokafka.

    It holds at most the producer's ``max_batch_bytes`` (counted as for ``send``; a first
    record always fits) and applies its ``key_serializer`` and ``value_serializer``.
    Records are packed as they are appended, so a batch may be filled while earlier ones
    are on their way.
    """

    __slots__ = ("_append", "_closed", "_count", "_key_serializer", "_max_bytes", "_sent",
                 "_size", "_value_serializer", "_writer")

    def __init__(self, max_batch_bytes: int, *, key_serializer: Serializer | None = None,
                 value_serializer: Serializer | None = None) -> None:
        if max_batch_bytes <= 0:
            raise ValueError("max_batch_bytes must be positive")
        self._max_bytes = max_batch_bytes
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._writer = BatchWriter()
        self._append = self._writer.append
        self._count = 0
        self._size = 0
        self._closed = False
        self._sent = False

    def append(self, *, key: Any = None, value: Any = None, timestamp: int | None = None,
               headers: Sequence[tuple[str, bytes | None]] | None = None,
               ) -> BatchRecordMetadata | None:
        """Add one record; its metadata, or None (and nothing added) when the batch is
        full or closed: send it and start another.

        ``timestamp`` is epoch milliseconds (default: now). Keys and values are bytes or
        None once serialized; a wrong type raises TypeError, as ``send`` does.
        """
        if self._closed:
            return None
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        size = RECORD_OVERHEAD
        if key is not None:
            if type(key) is not bytes:
                key = as_bytes("key", key)
            size += len(key)
        if value is not None:
            if type(value) is not bytes:
                value = as_bytes("value", value)
            size += len(value)
        if headers:
            headers = check_headers(headers)
            size += headers_size(headers)
        count = self._count
        if count and self._size + size > self._max_bytes:
            return None
        if timestamp is None:
            ts = _time_ns() // 1_000_000
        elif type(timestamp) is int:
            ts = timestamp
        else:
            raise TypeError(f"timestamp must be an int (epoch milliseconds), got "
                            f"{type(timestamp).__name__}")
        self._append(key, value, ts, headers or ())
        self._count = count + 1
        self._size += size
        return _new_tuple(BatchRecordMetadata, (count, ts, size))

    def close(self) -> None:
        """Take no more records (``append`` returns None); ``send_batch`` closes it too."""
        self._closed = True

    def size(self) -> int:
        """The bytes the batch counts against ``max_batch_bytes`` and the producer's
        ``max_buffer_bytes``."""
        return self._size

    def record_count(self) -> int:
        """How many records it holds."""
        return self._count

    def _take(self) -> BatchWriter:
        """The records, for ``send_batch``: the batch closes and may not be sent again."""
        if self._sent:
            raise ValueError("this batch was sent already: create_batch() a new one")
        self._sent = self._closed = True
        return self._writer


def check_headers(headers: Sequence[tuple[str, bytes | None]],
                  ) -> Sequence[tuple[str, bytes | None]]:
    """``headers`` as a list or tuple of ``(str, bytes | None)`` pairs, or TypeError."""
    hdrs = headers if type(headers) is list or type(headers) is tuple else list(headers)
    for pair in hdrs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2
                and isinstance(pair[0], str) and (pair[1] is None or isinstance(pair[1], bytes))):
            raise TypeError("headers must be (str, bytes | None) pairs")
    return hdrs


def as_bytes(name: str, v: object) -> bytes:
    """A serialized key or value that is not bytes: a bytearray or memoryview copied,
    anything else a TypeError."""
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise TypeError(f"{name} must be bytes or None (or pass a {name}_serializer),"
                    f" got {type(v).__name__}")
