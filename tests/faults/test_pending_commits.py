"""An OffsetCommit whose records are not durable yet is not readable yet: another
client's OffsetFetch in that window sees the offset from before it (as Kafka keeps a
pending commit out of its cache until the append completes). Otherwise a coordinator
failover in the window would make the group's committed offset go backwards."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from groupwire.broker.storage.fileops import FileOps
from groupwire.client.connection import Connection
from groupwire.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from tests.integration.rawgroup import create_topic

from .conftest import StartBroker


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
