"""The chaos verdict reads replicas from data dirs: Kafka clients' batches as well as the
SDK's, since one partition may hold both (docs/protocol.md §13.4)."""

from __future__ import annotations

from pathlib import Path

from groupwire.broker.storage import StorageConfig
from groupwire.broker.storage.partition_log import PartitionLog
from groupwire.broker.storage.topic_store import LOGS_DIR
from groupwire.cli.chaos.replica_logs import read_partition, values
from groupwire.protocol import batches as mp
from groupwire.protocol.batches import BatchRecord
from groupwire.protocol.kafka import records as kr


def test_a_replica_of_both_formats_is_read_whole(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / LOGS_DIR / "t-0", StorageConfig(segment_bytes=300),
                       topic="t", partition=0)
    expected: dict[int, bytes | None] = {}
    for i in range(12):
        recs = [BatchRecord(value=b"v%d-%d" % (i, j), key=None, timestamp_ms=1 + j)
                for j in range(2)]
        if i % 2:
            batch = kr.encode_batch(recs, compression=kr.COMPRESSION_LZ4)
            base = log.append(batch, kr.validate_batch(batch))
        else:
            batch = mp.encode_batch(recs)
            base = log.append(batch, mp.validate_batch(batch))
        expected.update({base + j: r.value for j, r in enumerate(recs)})
    log.close()
    batches = read_partition(tmp_path, "t", 0)
    assert batches is not None and len(batches) == 12
    assert values(batches) == expected
    assert read_partition(tmp_path, "t", 1) is None
