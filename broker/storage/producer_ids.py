"""Producer ids for InitProducerId: never the same one twice, across restarts too.

A Kafka producer with idempotence on (librdkafka's and the Java client's default) asks
for a producer id first and stamps it on every batch; two producers given the same id
would be one producer to anything that deduplicates by it. So ids go out of blocks, and
a block is written down before its first id goes out: ``producer-ids`` in the data dir
holds the first id not yet reserved, replaced atomically and fsynced (file and
directory) whatever ``--fsync`` says, as the storage id is. A broker that crashes starts
after the last block it reserved, losing at most the rest of that block; ids are int64,
so a block of 1000 per restart never runs out.

The broker asks :meth:`LocalProducerIds.next_id` on the event loop, answering
InitProducerId through either door; one call in ``block_size`` writes the file there, a
few hundred microseconds to a few milliseconds of fsync. A failed write hands out
nothing (None) and is tried again on the next call.

In a cluster, ids must also differ between brokers: they come from blocks the cluster
hands out in etcd instead (``broker.clustering.producer_ids``), as Kafka's controller
hands out AllocateProducerIds blocks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, Protocol

from groupwire.broker.logs import get_logger
from groupwire.broker.storage.errors import StorageError
from groupwire.broker.storage.fileops import FileOps

log = get_logger("groupwire.storage")

PRODUCER_IDS_FILE: Final = "producer-ids"
FORMAT: Final = 1
BLOCK_SIZE: Final = 1000
MAX_PRODUCER_ID: Final = 2**63 - 1
"""Kafka's producer ids are int64; -1 means none."""


class ProducerIds(Protocol):
    """Where InitProducerId's answers come from."""

    def next_id(self) -> int | None:
        """An id never handed out before, or None if none can be had right now."""
        ...


class LocalProducerIds:
    """A single broker's producer ids, reserved a block at a time in its data dir."""

    def __init__(self, data_dir: Path, *, block_size: int = BLOCK_SIZE,
                 file_ops: FileOps | None = None, limit: int = MAX_PRODUCER_ID) -> None:
        """Reads what was reserved before; raises :class:`StorageError` if the file
        cannot be read or holds something else (starting again from 0 could hand out
        ids already in use)."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self._path = Path(data_dir) / PRODUCER_IDS_FILE
        self._ops = file_ops or FileOps()
        self._block = block_size
        self._limit = limit
        """The largest id this broker may hand out."""
        self._next = self._end = _load(self._path)
        """Ids from ``_next`` up to ``_end`` are reserved and not handed out yet."""

    @property
    def reserved_to(self) -> int:
        """The first id of the next block (every id below it may be in use)."""
        return self._end

    def next_id(self) -> int | None:
        if self._next >= self._end and not self._reserve():
            return None
        pid = self._next
        self._next += 1
        return pid

    def _reserve(self) -> bool:
        """Write down the next block before any of its ids goes out."""
        end = min(self._end + self._block, self._limit + 1)
        if end <= self._end:
            log.error("producer_ids_exhausted", file=str(self._path))
            return False
        data = json.dumps({"format": FORMAT, "reserved_to": end}).encode() + b"\n"
        try:
            self._ops.write_file_atomic(self._path, data, sync=True)
        except OSError as exc:
            log.error("producer_ids_not_reserved", file=str(self._path), error=str(exc))
            return False
        self._next, self._end = self._end, end
        return True


def _load(path: Path) -> int:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    try:
        doc = json.loads(raw)
        if doc.get("format") != FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        end = doc["reserved_to"]
        if type(end) is not int or not 0 <= end <= MAX_PRODUCER_ID + 1:
            raise ValueError(f"bad reserved_to {end!r}")
    except (ValueError, KeyError, AttributeError, TypeError) as exc:
        raise StorageError(f"unreadable producer ids {path}: {exc} (the broker must not "
                           f"hand out producer ids that may be in use)") from exc
    return end
