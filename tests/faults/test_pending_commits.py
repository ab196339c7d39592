"""An OffsetCommit whose records are not durable yet is not readable yet: another
client's OffsetFetch in that window sees the offset stored before it (as Kafka keeps a
pending commit out of its cache until the append completes). Otherwise a coordinator
failover in the window would make the group's committed offset go backwards. A commit
whose write fails is never shown, however its outcome overlaps others' (issue 24 item 7)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from groupwire.broker.storage.fileops import FileOps
from groupwire.client.connection import Connection
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from tests.integration.rawgroup import create_topic, produce

from .conftest import FaultyDisk, StartBroker


class HeldDisk(FileOps):
    """While ``holding``, an fsync waits for ``release`` (and says so in ``entered``)."""

    def __init__(self) -> None:
        self.holding = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def fsync(self, fd: int) -> None:
        if self.holding:
            self.entered.set()
            self.release.wait(30)
        super().fsync(fd)


class HeldFaultyDisk(FaultyDisk):
    """Writes fail while ``failing``; an fsync waits for ``release`` while ``holding``."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def fsync(self, fd: int) -> None:
        if self.holding:
            self.entered.set()
            self.release.wait(30)
        super().fsync(fd)


def _commit(offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id="g", topics=[OffsetCommitRequestTopic(
        name="t", partitions=[OffsetCommitRequestPartition(partition_index=0,
                                                           committed_offset=offset)])])


async def _committed(conn: Connection) -> int:
    resp = await conn.send(OffsetFetchRequest(group_id="g", topics=[
        OffsetFetchRequestTopic(name="t", partition_indexes=[0])]),
        response_type=OffsetFetchResponse)
    return resp.topics[0].partitions[0].committed_offset


async def test_a_commit_is_read_only_once_it_is_durable(start_broker: StartBroker,
                                                        tmp_path: Path) -> None:
    disk = HeldDisk()
    broker = await start_broker(file_ops=disk, fsync="always")
    committer = await Connection.open("127.0.0.1", broker.port, client_id="committer")
    reader = await Connection.open("127.0.0.1", broker.port, client_id="reader")
    try:
        await create_topic(committer, "t", 1)
        first = await committer.send(_commit(3), response_type=OffsetCommitResponse)
        assert first.topics[0].partitions[0].error_code == 0
        disk.holding = True
        answer = asyncio.ensure_future(
            committer.send(_commit(7), response_type=OffsetCommitResponse))
        assert await asyncio.to_thread(disk.entered.wait, 10)
        assert await _committed(reader) == 3  # 7 is not stored yet
        assert not answer.done()
        disk.holding = False
        disk.release.set()
        assert (await answer).topics[0].partitions[0].error_code == 0
        assert await _committed(reader) == 7
    finally:
        disk.release.set()
        await committer.close()
        await reader.close()


def _code(response: OffsetCommitResponse) -> int:
    return response.topics[0].partitions[0].error_code


async def test_overlapping_failed_commits_leave_the_stored_offset(
        start_broker: StartBroker, tmp_path: Path) -> None:
    """The chaos run's scenario on one broker: 190 stored; 191 and 192 both pending
    (their records refused by the disk, their outcome waiting on an fsync in flight),
    then both failed. OffsetFetch must say 190 (the old shell reverted 192 to 191, a
    commit nobody was told succeeded), and so must the log after a restart."""
    disk = HeldFaultyDisk()
    broker = await start_broker(file_ops=disk, fsync="always")
    first = await Connection.open("127.0.0.1", broker.port, client_id="first")
    second = await Connection.open("127.0.0.1", broker.port, client_id="second")
    reader = await Connection.open("127.0.0.1", broker.port, client_id="reader")
    try:
        await create_topic(first, "t", 1)
        assert _code(await first.send(_commit(190), response_type=OffsetCommitResponse)) == 0
        disk.holding = True  # the next fsync round holds every outcome behind it
        held = asyncio.ensure_future(produce(reader, "t", 0, [b"x"]))
        assert await asyncio.to_thread(disk.entered.wait, 10)
        disk.failing = True
        a = asyncio.ensure_future(first.send(_commit(191), response_type=OffsetCommitResponse))
        b = asyncio.ensure_future(second.send(_commit(192), response_type=OffsetCommitResponse))
        assert await _committed(reader) == 190
        assert not a.done() and not b.done()
        disk.holding = False
        disk.release.set()
        await held  # refused too: its fsync failed
        assert _code(await a) == _code(await b) == ErrorCode.KAFKA_STORAGE_ERROR
        assert disk.refused >= 2
        disk.failing = False
        assert await _committed(reader) == 190
    finally:
        disk.release.set()
        await first.close()
        await second.close()
        await reader.close()
    await broker.close()
    again = await start_broker(data_dir=tmp_path / "data")
    conn = await Connection.open("127.0.0.1", again.port, client_id="after")
    try:
        assert await _committed(conn) == 190
    finally:
        await conn.close()
