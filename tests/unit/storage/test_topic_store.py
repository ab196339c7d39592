"""TopicStore: topics and their rules, metadata that survives restarts, internal topics."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from groupwire.broker.storage import (
    EVENTS_TOPIC,
    OFFSETS_TOPIC,
    FsyncPolicy,
    NoSuchPartitionError,
    PartitionCountError,
    StorageConfig,
    StorageError,
    TopicExistsError,
    TopicRefusedError,
    TopicStore,
)
from groupwire.protocol.errors import ErrorCode

H = Any
SMALL = StorageConfig(offsets_partitions=3, segment_bytes=4096)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = TopicStore(tmp_path / "data", SMALL)
    yield s
    s.close()


def test_a_new_data_dir_has_a_cluster_id_and_the_internal_topics(tmp_path: Path) -> None:
    store = TopicStore(tmp_path / "fresh")
    assert uuid.UUID(store.cluster_id)
    assert store.topics() == {OFFSETS_TOPIC: 50, EVENTS_TOPIC: 1}
    assert store.offsets_partitions == 50
    assert store.is_internal(OFFSETS_TOPIC) and store.is_internal(EVENTS_TOPIC)
    assert store.log(OFFSETS_TOPIC, 49).log_end_offset == 0
    store.close()


def test_offsets_partitions_is_fixed_when_the_dir_is_created(tmp_path: Path) -> None:
    first = TopicStore(tmp_path / "d", StorageConfig(offsets_partitions=3))
    cluster_id = first.cluster_id
    first.close()
    second = TopicStore(tmp_path / "d", StorageConfig(offsets_partitions=7))
    assert second.offsets_partitions == 3 == second.partition_count(OFFSETS_TOPIC)
    assert second.cluster_id == cluster_id
    with pytest.raises(NoSuchPartitionError):
        second.log(OFFSETS_TOPIC, 3)
    second.close()


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a/b", "a b", "tópico", "__mine",
                                  OFFSETS_TOPIC, "x\n"])
def test_invalid_topic_names(store: Any, name: str) -> None:
    with pytest.raises(TopicRefusedError) as info:
        store.create_topic(name, 1)
    assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert store.partition_count(name) is None or name == OFFSETS_TOPIC


@pytest.mark.parametrize("name", ["a", "a" * 249, "A.b_c-9", "...", "_x", "-"])
def test_valid_topic_names(store: Any, name: str) -> None:
    store.create_topic(name, 2)
    assert store.partition_count(name) == 2
    assert not store.is_internal(name)


def test_create_topic_errors(store: Any) -> None:
    store.create_topic("t", 1)
    with pytest.raises(TopicExistsError) as exists:
        store.create_topic("t", 3)
    assert exists.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
    for bad in (0, -1):
        with pytest.raises(PartitionCountError) as invalid:
            store.create_topic("u", bad)
        assert invalid.value.code == ErrorCode.INVALID_PARTITIONS
    assert store.partition_count("t") == 1 and store.partition_count("u") is None


def test_create_partitions_grows_only(store: Any, h: H) -> None:
    store.create_topic("t", 2)
    h.append(store.log("t", 1), [b"kept"])
    store.create_partitions("t", 5)
    assert store.partition_count("t") == 5
    assert store.log("t", 4).log_end_offset == 0
    assert h.values(h.read_all(store.log("t", 1))) == [b"kept"]
    for total in (5, 3):
        with pytest.raises(PartitionCountError):
            store.create_partitions("t", total)
    with pytest.raises(TopicRefusedError):
        store.create_partitions(EVENTS_TOPIC, 2)
    with pytest.raises(NoSuchPartitionError) as unknown:
        store.create_partitions("nope", 2)
    assert unknown.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_unknown_partition_is_a_key_error_and_a_storage_error(store: Any) -> None:
    store.create_topic("t", 1)
    for topic, p in (("t", 1), ("t", -1), ("nope", 0)):
        with pytest.raises(KeyError):
            store.log(topic, p)
        with pytest.raises(StorageError):
            store.log(topic, p)


def test_topics_and_data_survive_a_restart(tmp_path: Path, h: H) -> None:
    store = TopicStore(tmp_path / "d", SMALL)
    store.create_topic("orders", 2)
    store.create_topic("audit", 1)
    store.create_partitions("orders", 3)
    h.append(store.log("orders", 2), [b"x", b"y"])
    store.close()
    again = TopicStore(tmp_path / "d", SMALL)
    assert again.topics() == {OFFSETS_TOPIC: 3, EVENTS_TOPIC: 1, "orders": 3, "audit": 1}
    assert h.values(h.read_all(again.log("orders", 2))) == [b"x", b"y"]
    assert again.recovery == [] and again.recovery_reports() == []
    again.close()


def test_a_crash_is_recovered_and_reported(tmp_path: Path, h: H) -> None:
    store = TopicStore(tmp_path / "d", SMALL)
    store.create_topic("t", 1)
    h.append(store.log("t", 0), [b"a"])
    store.close(sync=False)  # as after SIGKILL: no clean-shutdown marker
    assert not (tmp_path / "d" / "clean_shutdown").exists()
    segment = tmp_path / "d" / "logs" / "t-0" / "00000000000000000000.log"
    segment.write_bytes(segment.read_bytes() + b"\x92\x95torn")
    again = TopicStore(tmp_path / "d", SMALL)
    [report] = again.recovery_reports()
    assert report["topic"] == "t" and report["partition"] == 0
    assert report["truncated_bytes"] == 6 and isinstance(report["reason"], str)
    assert h.values(h.read_all(again.log("t", 0))) == [b"a"]
    again.close()


def test_the_clean_marker_lives_only_between_close_and_open(tmp_path: Path) -> None:
    marker = tmp_path / "d" / "clean_shutdown"
    store = TopicStore(tmp_path / "d", SMALL)
    assert not marker.exists()
    store.close()
    assert marker.exists()
    store = TopicStore(tmp_path / "d", SMALL)
    assert not marker.exists()
    store.close()


def test_one_store_per_data_dir(tmp_path: Path) -> None:
    store = TopicStore(tmp_path / "d", SMALL)
    with pytest.raises(StorageError, match="in use"):
        TopicStore(tmp_path / "d", SMALL)
    store.close()
    TopicStore(tmp_path / "d", SMALL).close()


def test_unreadable_metadata_refuses_to_open(tmp_path: Path) -> None:
    TopicStore(tmp_path / "d", SMALL).close()
    meta = tmp_path / "d" / "meta.json"
    doc = json.loads(meta.read_text())
    assert doc["offsets_partitions"] == 3 and doc["topics"][EVENTS_TOPIC] == 1
    meta.write_text("{not json")
    with pytest.raises(StorageError, match="meta"):
        TopicStore(tmp_path / "d", SMALL)


def test_append_kv_and_scan(store: Any) -> None:
    first = store.append_kv(OFFSETS_TOPIC, 1, [(b"k1", b"v1", 10), (b"k2", None, 11)])
    second = store.append_kv(OFFSETS_TOPIC, 1, [(b"k1", b"v1b", 12)])
    assert (first, second) == (0, 2)
    assert store.append_kv(OFFSETS_TOPIC, 1, []) == 3
    got = [(r.offset, r.key, r.value, r.timestamp_ms) for r in store.scan(OFFSETS_TOPIC, 1)]
    assert got == [(0, b"k1", b"v1", 10), (1, b"k2", None, 11), (2, b"k1", b"v1b", 12)]
    assert [r.offset for r in store.scan(OFFSETS_TOPIC, 1, from_offset=1)] == [1, 2]
    assert list(store.scan(OFFSETS_TOPIC, 0)) == []
    with pytest.raises(NoSuchPartitionError):
        store.append_kv("nope", 0, [(b"k", b"v", 1)])


def test_always_policy_flushes_every_dirty_partition(tmp_path: Path, h: H) -> None:
    config = StorageConfig(offsets_partitions=2, fsync=FsyncPolicy.ALWAYS)
    store = TopicStore(tmp_path / "d", config)
    store.create_topic("t", 3)
    ticket = store.take_dirty()  # the new partitions' files and directories
    ticket.sync()
    store.complete(ticket)
    assert store.take_dirty().empty
    h.append(store.log("t", 0), [b"a"])
    store.append_kv(EVENTS_TOPIC, 0, [(b"g", b"e", 1)])
    assert store.log("t", 0).high_watermark == 0
    assert [r.value for r in store.scan(EVENTS_TOPIC, 0)] == [b"e"]  # scan reads to the end
    ticket = store.take_dirty()
    assert len(ticket.items) == 2
    ticket.sync()
    store.complete(ticket)
    assert store.log("t", 0).high_watermark == 1
    assert store.log(EVENTS_TOPIC, 0).high_watermark == 1
    assert store.log("t", 1).high_watermark == 0
    assert store.take_dirty().empty
    store.close()


def test_a_closed_store_refuses_changes(tmp_path: Path) -> None:
    store = TopicStore(tmp_path / "d", SMALL)
    store.close()
    store.close()
    with pytest.raises(StorageError):
        store.create_topic("t", 1)
