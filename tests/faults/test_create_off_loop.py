"""Creating partitions runs off the event loop (issue 14): while a topic's files are being
made, other connections are answered, the name and the partitions are reserved, and a
creation that fails leaves nothing behind."""

from __future__ import annotations

import asyncio
import errno
import json
import threading
from pathlib import Path

from groupwire.broker.storage.fileops import FileOps
from groupwire.client.connection import Connection
from groupwire.protocol.errors import ErrorCode
from groupwire.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)
from tests.integration.rawgroup import produce

from .conftest import StartBroker

ANSWER_S = 5.0
"""Bound on an answer that must come while a creation is held (old code: never)."""
GATE_S = 10.0
"""How long the held disk waits before letting the creation go on its own."""


class GatedDisk(FileOps):
    """The first directory fsync of ``logs/`` (a creation's, once its partitions' files
    exist) waits until the test opens the gate; with ``fail_partition`` set, opening that
    partition's files of ``topic`` fails instead. Neither happens under a lock of storage's,
    as a slow disk would not."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.armed = True
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.timed_out = False
        self.fail_partition: int | None = None

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        if (self.fail_partition is not None
                and Path(path).parent.name == f"{self.topic}-{self.fail_partition}"):
            raise OSError(errno.EIO, "injected disk failure", str(path))
        return super().open(path, flags, mode)

    def fsync_dir(self, path: Path) -> None:
        if self.armed and Path(path).name == "logs" and self.fail_partition is None:
            self.armed = False
            self.entered.set()
            if not self.gate.wait(GATE_S):
                self.timed_out = True  # the loop was blocked: nobody opened the gate
        super().fsync_dir(path)


async def _send(conn: Connection, request: object, response_type: type) -> object:
    return await asyncio.wait_for(conn.send(request, response_type=response_type),  # type: ignore[arg-type]
                                  ANSWER_S)


def _metadata(name: str) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequestTopic(name=name)],
                           allow_auto_topic_creation=False)


async def test_a_creation_in_flight_holds_no_one_else_and_reserves_name_and_partitions(
        start_broker: StartBroker, tmp_path: Path) -> None:
    disk = GatedDisk("big")
    broker = await start_broker(file_ops=disk, max_partitions=51 + 2 + 40 + 10)
    creator = await Connection.open("127.0.0.1", broker.port, client_id="creator")
    other = await Connection.open("127.0.0.1", broker.port, client_id="other")
    try:
        creating = asyncio.ensure_future(creator.send(
            CreateTopicsRequest(topics=[CreatableTopic(name="big", num_partitions=40)]),
            response_type=CreateTopicsResponse))
        assert await asyncio.to_thread(disk.entered.wait, GATE_S)

        versions = await _send(other, ApiVersionsRequest(), ApiVersionsResponse)
        assert versions.error_code == ErrorCode.NONE  # type: ignore[attr-defined]
        meta = await _send(other, _metadata("big"), MetadataResponse)
        assert meta.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE  # type: ignore[attr-defined]
        again = await _send(other, CreateTopicsRequest(topics=[
            CreatableTopic(name="big", num_partitions=1)]), CreateTopicsResponse)
        assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS  # type: ignore[attr-defined]
        produced = await asyncio.wait_for(produce(other, "big", 0, [b"early"]), ANSWER_S)
        code = produced.responses[0].partition_responses[0].error_code
        assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # 51 internal + "small"(2) + 40 reserved leaves 10: 11 must be refused
        small = await _send(other, CreateTopicsRequest(topics=[
            CreatableTopic(name="small", num_partitions=2)]), CreateTopicsResponse)
        assert small.topics[0].error_code == ErrorCode.NONE  # type: ignore[attr-defined]
        over = await _send(other, CreateTopicsRequest(topics=[
            CreatableTopic(name="over", num_partitions=11)]), CreateTopicsResponse)
        assert over.topics[0].error_code == ErrorCode.POLICY_VIOLATION  # type: ignore[attr-defined]
        assert "40 are being created" in over.topics[0].error_message  # type: ignore[attr-defined]
        grow = await _send(other, CreatePartitionsRequest(topics=[
            CreatePartitionsTopic(name="small", count=13)]), CreatePartitionsResponse)
        assert grow.results[0].error_code == ErrorCode.POLICY_VIOLATION  # type: ignore[attr-defined]
        deleting = asyncio.ensure_future(other.send(DeleteTopicsRequest(topic_names=["big"]),
                                                    response_type=DeleteTopicsResponse))
        await asyncio.sleep(0)
        assert not creating.done() and not deleting.done()

        disk.gate.set()
        created = await asyncio.wait_for(creating, GATE_S)
        assert created.topics[0].error_code == ErrorCode.NONE, created
        assert not disk.timed_out
        # the delete waited for the creation, then took effect
        deleted = await asyncio.wait_for(deleting, ANSWER_S)
        assert deleted.responses[0].error_code == ErrorCode.NONE, deleted
        gone = await _send(other, _metadata("big"), MetadataResponse)
        assert gone.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
    finally:
        disk.gate.set()
        await creator.close()
        await other.close()


async def test_requests_after_a_creation_on_its_connection_see_the_topic(
        start_broker: StartBroker) -> None:
    disk = GatedDisk("seq")
    broker = await start_broker(file_ops=disk)
    conn = await Connection.open("127.0.0.1", broker.port, client_id="seq")
    try:
        creating = asyncio.ensure_future(conn.send(
            CreateTopicsRequest(topics=[CreatableTopic(name="seq", num_partitions=3)]),
            response_type=CreateTopicsResponse))
        producing = asyncio.ensure_future(produce(conn, "seq", 2, [b"after"]))
        assert await asyncio.to_thread(disk.entered.wait, GATE_S)
        disk.gate.set()
        created = await asyncio.wait_for(creating, GATE_S)
        assert created.topics[0].error_code == ErrorCode.NONE
        produced = await asyncio.wait_for(producing, ANSWER_S)
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        assert not disk.timed_out
    finally:
        disk.gate.set()
        await conn.close()


async def test_a_creation_that_fails_leaves_no_half_topic(
        start_broker: StartBroker, tmp_path: Path) -> None:
    disk = GatedDisk("half")
    disk.fail_partition = 7
    data_dir = tmp_path / "half-data"
    broker = await start_broker(file_ops=disk, data_dir=data_dir, fsync="always")
    conn = await Connection.open("127.0.0.1", broker.port, client_id="half")
    try:
        failed = await _send(conn, CreateTopicsRequest(topics=[
            CreatableTopic(name="half", num_partitions=10)]), CreateTopicsResponse)
        assert failed.topics[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR  # type: ignore[attr-defined]
        assert sorted(p.name for p in (data_dir / "logs").iterdir()
                      if p.name.startswith("half")) == []
        assert "half" not in json.loads((data_dir / "meta.json").read_text())["topics"]
        meta = await _send(conn, _metadata("half"), MetadataResponse)
        assert meta.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[attr-defined]
        assert broker.store is not None and broker.store.partitions_reserved == 0

        disk.fail_partition = None
        disk.gate.set()
        retried = await _send(conn, CreateTopicsRequest(topics=[
            CreatableTopic(name="half", num_partitions=10)]), CreateTopicsResponse)
        assert retried.topics[0].error_code == ErrorCode.NONE  # type: ignore[attr-defined]
        produced = await asyncio.wait_for(produce(conn, "half", 9, [b"x"]), ANSWER_S)
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    finally:
        await conn.close()
