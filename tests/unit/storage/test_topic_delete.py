"""TopicStore.delete_topic: metadata first, then the partitions' directories; a crash in
between (directories no metadata names) is cleaned at the next open."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupwire.broker.storage import (
    EVENTS_TOPIC,
    OFFSETS_TOPIC,
    FileOps,
    FsyncPolicy,
    NoSuchPartitionError,
    StorageConfig,
    StorageError,
    TopicRefusedError,
    TopicStore,
)
from groupwire.protocol.batches import BatchRecord, encode_batch, validate_batch
from groupwire.protocol.errors import ErrorCode

SMALL = StorageConfig(offsets_partitions=3, segment_bytes=4096)


def _append(store: TopicStore, topic: str, partition: int, value: bytes) -> int:
    batch = encode_batch([BatchRecord(value=value, timestamp_ms=1_000)])
    return store.log(topic, partition).append(batch, validate_batch(batch))


def _dirs(data: Path) -> set[str]:
    return {p.name for p in (data / "logs").iterdir()}


def _meta_topics(data: Path) -> dict[str, int]:
    topics: dict[str, int] = json.loads((data / "meta.json").read_text())["topics"]
    return topics


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data: Path) -> Iterator[TopicStore]:
    s = TopicStore(data, SMALL)
    yield s
    s.close()


def test_delete_removes_metadata_logs_and_directories(store: TopicStore, data: Path) -> None:
    store.create_topic("gone", 2)
    store.create_topic("kept", 1)
    _append(store, "gone", 1, b"x")
    assert store.delete_topic("gone") == 2
    assert store.partition_count("gone") is None and "gone" not in store.topics()
    assert "gone" not in _meta_topics(data) and _meta_topics(data)["kept"] == 1
    with pytest.raises(NoSuchPartitionError):
        store.log("gone", 0)
    assert {"gone-0", "gone-1"}.isdisjoint(_dirs(data)) and "kept-0" in _dirs(data)
    assert not [d for d in _dirs(data) if d.endswith("-delete")]


def test_unknown_and_internal_topics_are_refused(store: TopicStore) -> None:
    with pytest.raises(NoSuchPartitionError) as unknown:
        store.delete_topic("nope")
    assert unknown.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for name in (OFFSETS_TOPIC, EVENTS_TOPIC):
        with pytest.raises(TopicRefusedError) as refused:
            store.delete_topic(name)
        assert refused.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert str(refused.value) == (f"{name} is internal: the broker's own topic, "
                                      "it cannot be deleted")
    assert store.partition_count(OFFSETS_TOPIC) == 3


def test_a_deletion_survives_reopening(data: Path) -> None:
    store = TopicStore(data, SMALL)
    store.create_topic("gone", 1)
    _append(store, "gone", 0, b"x")
    store.delete_topic("gone")
    store.close()
    again = TopicStore(data, SMALL)
    assert again.partition_count("gone") is None and again.strays_removed == []
    again.close()


def test_the_name_is_created_again_empty(store: TopicStore) -> None:
    store.create_topic("again", 1)
    _append(store, "again", 0, b"old")
    _append(store, "again", 0, b"old")
    store.delete_topic("again")
    store.create_topic("again", 3)
    plog = store.log("again", 0)
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
    assert _append(store, "again", 0, b"new") == 0


def test_a_crash_after_the_metadata_write_leaves_strays_removed_at_open(data: Path) -> None:
    store = TopicStore(data, SMALL)
    store.create_topic("half", 2)
    _append(store, "half", 0, b"x")
    store.create_topic("kept", 1)
    store.close()
    # what a crash right after meta.json was replaced leaves: the directories still there
    meta = json.loads((data / "meta.json").read_text())
    del meta["topics"]["half"]
    (data / "meta.json").write_text(json.dumps(meta))
    (data / "logs" / "kept-0.0123-delete").mkdir()  # and a renamed one not yet removed
    again = TopicStore(data, SMALL)
    assert again.strays_removed == ["half-0", "half-1", "kept-0.0123-delete"]
    assert {"half-0", "half-1", "kept-0.0123-delete"}.isdisjoint(_dirs(data))
    assert again.partition_count("kept") == 1 and "kept-0" in _dirs(data)
    again.create_topic("half", 1)
    assert again.log("half", 0).log_end_offset == 0
    again.close()


def test_a_new_data_dir_never_removes_directories(data: Path) -> None:
    (data / "logs" / "orphan-0").mkdir(parents=True)  # no meta.json: nothing says stray
    store = TopicStore(data, SMALL)
    assert store.fresh and store.strays_removed == [] and "orphan-0" in _dirs(data)
    store.close()
    again = TopicStore(data, SMALL)
    assert not again.fresh and again.strays_removed == ["orphan-0"]
    again.close()


def test_directories_wait_for_the_flush_in_flight(tmp_path: Path) -> None:
    """A flush ticket taken before the deletion may fsync the partition's directory: the
    directory stays until that ticket completes, then a purge (off the loop) removes it."""
    data = tmp_path / "data"
    store = TopicStore(data, StorageConfig(offsets_partitions=1, fsync=FsyncPolicy.ALWAYS))
    store.create_topic("busy", 1)
    _append(store, "busy", 0, b"x")
    ticket = store.take_dirty()
    assert not ticket.empty
    store.delete_topic("busy")
    assert "busy-0" in _dirs(data) and store.partition_count("busy") is None
    ticket.sync()  # as the flush thread would, after the deletion: no error
    store.complete(ticket)
    assert "busy-0" in _dirs(data)  # complete() runs on the loop: it removes nothing
    assert store.purge().dirs == [data / "logs" / "busy-0"]
    assert "busy-0" not in _dirs(data)
    store.close()


def test_a_metadata_write_that_fails_leaves_the_topic(data: Path) -> None:
    class NoReplace(FileOps):
        fail = False

        def replace(self, src: Path, dst: Path) -> None:
            if self.fail:
                raise OSError(28, "injected failure")
            super().replace(src, dst)

    ops = NoReplace()
    store = TopicStore(data, SMALL, file_ops=ops)
    store.create_topic("stays", 1)
    _append(store, "stays", 0, b"x")
    ops.fail = True
    with pytest.raises(StorageError) as failed:
        store.delete_topic("stays")
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert store.partition_count("stays") == 1 and "stays" in _meta_topics(data)
    assert store.log("stays", 0).log_end_offset == 1
    ops.fail = False
    store.close()
