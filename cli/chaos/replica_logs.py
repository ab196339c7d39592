"""Read a cluster run's partition logs straight from each broker's data dir.

Read once the brokers have stopped, so no file moves underneath. A log whose tail a
SIGKILL cut short yields every whole batch before the cut: the broker itself would
truncate the rest when it starts.
"""

from __future__ import annotations

from pathlib import Path

import msgpack

from groupwire.broker.storage.segment import LOG_SUFFIX
from groupwire.broker.storage.topic_store import LOGS_DIR
from groupwire.cli.chaos.verdict import StoredBatch
from groupwire.protocol.batches import CorruptBatchError
from groupwire.protocol.stored_batches import decode_any_records, iter_any_batch_spans


def read_partition(data_dir: Path, topic: str, partition: int) -> list[StoredBatch] | None:
    """The batches of one replica in offset order; None when the broker holds no replica."""
    directory = data_dir / LOGS_DIR / f"{topic}-{partition}"
    if not directory.is_dir():
        return None
    out: list[StoredBatch] = []
    for segment in sorted(directory.glob("*" + LOG_SUFFIX)):
        buf = segment.read_bytes()
        try:
            for header, start, end in iter_any_batch_spans(buf):  # Kafka's batches too
                out.append(StoredBatch(header.base_offset, header.last_offset,
                                       header.leader_epoch, buf[start:end]))
        except CorruptBatchError:
            break  # a torn tail: nothing after it is whole
    return out


def replicas_of(data_dirs: dict[int, Path], topic: str,
                partition: int) -> dict[int, list[StoredBatch]]:
    """node id -> that node's replica of the partition, for the nodes holding one."""
    found = {node: read_partition(d, topic, partition) for node, d in data_dirs.items()}
    return {node: batches for node, batches in found.items() if batches is not None}


def values(batches: list[StoredBatch]) -> dict[int, bytes | None]:
    """offset -> record value of one replica."""
    out: dict[int, bytes | None] = {}
    for b in batches:
        for r in decode_any_records(b.data):
            out[r.offset] = r.value
    return out


def rebalance_times(batches: list[StoredBatch], group: str) -> list[tuple[float, str]]:
    """(time in s, reason) of each ``rebalance_started`` event of ``group`` in a replica
    of ``__group_events``."""
    out: list[tuple[float, str]] = []
    for b in batches:
        for r in decode_any_records(b.data):
            if r.value is None:
                continue
            event = msgpack.unpackb(r.value, raw=False)
            if (isinstance(event, dict) and event.get("type") == "rebalance_started"
                    and event.get("group_id") == group):
                out.append((float(event.get("ts_ms", 0)) / 1000, str(event.get("reason"))))
    return out
