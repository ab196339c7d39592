"""Retention drops segments on the loop but removes their files off it (issue 24, item
5): a dropped segment is renamed ``.deleted`` (durably) before its unlink, an unlink that
fails is logged and tried again by the next purge, and a restart never loads a
``.deleted`` file, so data retention deleted does not come back."""

from __future__ import annotations

from pathlib import Path

import structlog

from groupwire.broker.storage import FileOps, StorageConfig, TopicStore
from groupwire.protocol.batches import BatchRecord, encode_batch, validate_batch

CONFIG = StorageConfig(offsets_partitions=1, segment_bytes=200)


class FailingUnlink(FileOps):
    """Unlinks of segment files marked deleted fail while ``fail`` is set."""

    def __init__(self) -> None:
        self.fail = True
        self.refused: list[Path] = []

    def unlink(self, path: Path) -> None:
        if self.fail and path.name.endswith(".deleted"):
            self.refused.append(path)
            raise OSError(5, "injected unlink failure")
        super().unlink(path)


def _fill(store: TopicStore, batches: int) -> None:
    plog = store.log("t", 0)
    for i in range(batches):
        batch = encode_batch([BatchRecord(value=b"v%03d" % i, timestamp_ms=1_000)])
        plog.append(batch, validate_batch(batch))


def _segments(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".log"))


def test_retention_leaves_files_to_the_purge(tmp_path: Path) -> None:
    store = TopicStore(tmp_path / "data", CONFIG)
    store.create_topic("t", 1)
    _fill(store, 20)
    plog = store.log("t", 0)
    directory = plog.directory
    before = _segments(directory)
    dropped = plog.apply_retention(0, -1, 0)
    assert dropped > 0 and plog.log_start_offset > 0
    assert _segments(directory) == before  # nothing unlinked by apply_retention itself
    purge = store.purge()
    assert len(purge.segments) == dropped and not purge.failed_segments
    assert len(_segments(directory)) == len(before) - dropped
    assert not [p for p in directory.iterdir() if p.name.endswith(".deleted")]
    store.close()


def test_a_failed_unlink_is_logged_retried_and_never_resurrected(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ops = FailingUnlink()
    ops.fail = False
    store = TopicStore(data, CONFIG, file_ops=ops)
    store.create_topic("t", 1)
    _fill(store, 20)
    plog = store.log("t", 0)
    directory = plog.directory
    assert plog.apply_retention(0, -1, 0) > 0
    start, end = plog.log_start_offset, plog.log_end_offset
    ops.fail = True
    with structlog.testing.capture_logs() as logs:
        first = store.purge()
    assert first.failed_segments and ops.refused
    failed = [e for e in logs if e["event"] == "segment_not_removed"]
    assert failed and "injected unlink failure" in failed[0]["error"]
    marked = sorted(p.name for p in directory.iterdir() if p.name.endswith(".deleted"))
    assert marked  # renamed (durably) before the unlink that failed

    retried = store.purge()  # the next retention check: tried again, failing again
    assert len(retried.segments) == len(first.segments)

    store.close(sync=False)  # a crash with the files still there
    again = TopicStore(data, CONFIG)
    reopened = again.log("t", 0)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (start, end)
    assert next(r.offset for r in reopened.scan(0)) == start  # nothing before it is back
    assert not [p for p in directory.iterdir() if p.name.endswith(".deleted")]
    again.close()


def test_a_retried_unlink_removes_the_files(tmp_path: Path) -> None:
    ops = FailingUnlink()
    ops.fail = False
    store = TopicStore(tmp_path / "data", CONFIG, file_ops=ops)
    store.create_topic("t", 1)
    _fill(store, 20)
    plog = store.log("t", 0)
    assert plog.apply_retention(0, -1, 0) > 0
    ops.fail = True
    assert store.purge().failed_segments
    ops.fail = False
    second = store.purge()
    assert second.segments and not second.failed_segments
    assert not [p for p in plog.directory.iterdir() if p.name.endswith(".deleted")]
    assert store.purge().empty
    store.close()
