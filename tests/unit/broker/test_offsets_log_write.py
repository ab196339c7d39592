"""``OffsetsLog.write`` (issue 14: one OffsetCommit of 10 000 partitions): the records
land as ``to_kv`` encodes them, in their group's ``__consumer_offsets`` partition, and
a restart replays them. (A guard: it passes on the code before issue 14 too.)"""

from __future__ import annotations

from pathlib import Path

from groupwire.broker.coordinator import (
    GroupDeleteRecord,
    GroupRecord,
    OffsetCommitRecord,
    OffsetDeleteRecord,
)
from groupwire.broker.offsets_log import OFFSETS_TOPIC, OffsetsLog
from groupwire.broker.storage import StorageConfig, TopicStore


def _store(path: Path) -> TopicStore:
    return TopicStore(path, StorageConfig(offsets_partitions=4))


def test_records_are_stored_as_to_kv_encodes_them_and_replay(
        tmp_path: Path) -> None:
    store = _store(tmp_path)
    log = OffsetsLog(store)
    groups = ["alpha", "beta", "gamma", "delta", "eps"]
    records: list[GroupRecord] = []
    for i, g in enumerate(groups):
        records += [OffsetCommitRecord(g, f"t{p % 3}", p, p * 10 + i, "m" * (p % 2), 7)
                    for p in range(40)]
        records.append(OffsetDeleteRecord(g, "t0", 0))
    records.append(GroupDeleteRecord("eps"))
    written = log.write(records, now_ms=1234)

    expected: dict[int, list[tuple[bytes, bytes | None]]] = {}
    for r in records:
        expected.setdefault(log.partition_of(r.group_id), []).append(r.to_kv())
    assert sorted(written) == sorted(expected)
    for partition, kvs in expected.items():
        stored = list(store.scan(OFFSETS_TOPIC, partition))
        assert [(s.key, s.value) for s in stored] == kvs
        assert {s.timestamp_ms for s in stored} == {1234}
        assert store.log(OFFSETS_TOPIC, partition).log_end_offset == len(kvs)
    store.close()

    again = _store(tmp_path)
    by_group = sorted(list(OffsetsLog(again).replay()), key=lambda r: r.group_id)
    assert by_group == sorted(records, key=lambda r: r.group_id)
    again.close()
